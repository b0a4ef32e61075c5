//! The lease: one invocation at a time works on a bucket. It is confirmed before every destructive
//! step ([`Fence`]), so a run that lost it stops instead of racing the new holder. Lease times are
//! wall-clock UTC (real elapsed time, not the pinned invocation time), read through a [`Clock`].

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::data::keys::LOCK_KEY;
use crate::data::state::put_settled;
use crate::infra::clock::{self, Clock};
use crate::infra::error::{Error, Result};
use crate::infra::stop::Stop;
use crate::infra::storage::{PutMode, S3Store, Store, etag_eq};

/// `lock.json` (`specs/lock.schema.json`; times UTC).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct Lease {
    pub holder: String,
    pub acquired_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// A held lease. Release it with [`LeaseGuard::release`]; if the process
/// dies, it lapses at `expires_at`.
#[derive(Debug)]
pub struct LeaseGuard<S = S3Store> {
    store: S,
    clock: Arc<dyn Clock>,
    lease: Lease,
    etag: String,
    length: Duration,
    /// When the GET of a [`LeaseGuard::confirm_ahead`] was sent (lease clock, monotonic clock),
    /// until the next [`LeaseGuard::confirm`] takes it.
    ahead: Option<(DateTime<Utc>, std::time::Instant)>,
    /// Asked to stop ([`LeaseGuard::stop_on`]): no confirmation from then on.
    stop: Option<Stop>,
}

/// How old a confirmation taken ahead may be for [`LeaseGuard::confirm`] to take it instead of a
/// GET, on both the lease and the monotonic clock (a wall clock stepped back does not make it
/// fresh). It bounds how late a run notices a lock file changed by hand; a takeover needs expiry
/// anyway.
pub const CONFIRM_AHEAD_MAX_AGE: Duration = Duration::from_secs(10);

/// How long the lease's release may take, all attempts together (its part of
/// [`crate::infra::storage::S3_DEADLINE_MARGIN`]).
pub const LEASE_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Lambda's longest timeout (15 minutes).
pub const LAMBDA_MAX_TIMEOUT: Duration = Duration::from_secs(900);

/// The longest a live lease can have left (no invocation outlasts [`LAMBDA_MAX_TIMEOUT`]); a lock
/// further ahead was not written by a run of this job as configured.
pub fn max_plausible_lease(length: Duration) -> Duration {
    length + LAMBDA_MAX_TIMEOUT
}

fn chrono_len(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl<S: Store + Clone> LeaseGuard<S> {
    /// [`LeaseGuard::acquire_with_clock`] on the system clock.
    pub async fn acquire(store: &S, holder: &str, length: Duration) -> Result<LeaseGuard<S>> {
        Self::acquire_with_clock(store, clock::system(), holder, length).await
    }

    /// Takes the lease for `holder` for `length`: created with `If-None-Match: *`, or an expired
    /// one taken over with `If-Match` on the ETag it was read with. A lock file that cannot be
    /// parsed is taken over like an expired one (S3 PUTs are atomic: it was written that way, not
    /// torn).
    ///
    /// Errors: [`Error::LeaseHeld`] when another holder's lease has not expired (or another
    /// invocation won the takeover); [`Error::LeaseImplausible`] ([`max_plausible_lease`]); S3
    /// errors.
    pub async fn acquire_with_clock(
        store: &S,
        clock: Arc<dyn Clock>,
        holder: &str,
        length: Duration,
    ) -> Result<LeaseGuard<S>> {
        let now = clock.now();
        let lease = Lease {
            holder: holder.to_string(),
            acquired_at: now,
            expires_at: now + chrono_len(length),
        };
        let body = serde_json::to_vec_pretty(&lease).expect("lease serialises");
        let guard = |etag| LeaseGuard {
            store: store.clone(),
            clock,
            lease,
            etag,
            length,
            ahead: None,
            stop: None,
        };
        // A lost answer is settled by put_settled: the lock holding this very lease is this run's.
        match put_settled(store, LOCK_KEY, body.clone(), PutMode::Create).await {
            Ok(etag) => return Ok(guard(etag)),
            Err(Error::PreconditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
        let taken = |first: &str| {
            let first = first.to_string();
            move |e| match e {
                Error::PreconditionFailed { .. } => held(store, &first, now),
                e => e,
            }
        };
        let Some(current) = store.get_opt(LOCK_KEY).await? else {
            // Released between our two calls: try the create once more.
            let etag = put_settled(store, LOCK_KEY, body, PutMode::Create)
                .await
                .map_err(taken("another invocation"))?;
            return Ok(guard(etag));
        };
        let existing: Option<Lease> = serde_json::from_slice(&current.body).ok();
        if let Some(l) = &existing {
            let max = chrono_len(max_plausible_lease(length));
            if l.expires_at - now > max {
                return Err(Error::LeaseImplausible {
                    bucket: store.bucket().to_string(),
                    key: LOCK_KEY.to_string(),
                    holder: l.holder.clone(),
                    expires_at: l.expires_at.to_rfc3339(),
                    seconds_left: (l.expires_at - now).num_seconds(),
                    max_seconds: max.num_seconds(),
                });
            }
            if l.expires_at > now {
                return Err(held(store, &l.holder, l.expires_at));
            }
            tracing::warn!(previous_holder = %l.holder, expired_at = %l.expires_at, "taking over an expired lease");
        } else {
            tracing::warn!(key = LOCK_KEY, "lease file is unreadable; taking it over by ETag");
        }
        let etag = put_settled(store, LOCK_KEY, body, PutMode::Update(current.etag))
            .await
            .map_err(taken("another invocation (it took the lease first)"))?;
        Ok(guard(etag))
    }

    /// Once `stop` is requested every confirmation fails with [`Error::Interrupted`]; the caller
    /// still releases the lease.
    pub fn stop_on(&mut self, stop: Stop) {
        self.stop = Some(stop);
    }

    fn check_stop(&self) -> Result<()> {
        match self.stop.as_ref().and_then(Stop::requested) {
            Some(signal) => Err(Error::Interrupted { signal, what: "a destructive step".into() }),
            None => Ok(()),
        }
    }

    /// Confirms the lease is still ours before a destructive step, renewing it once less than half
    /// is left; no request when a confirmation taken ahead is at most [`CONFIRM_AHEAD_MAX_AGE`] old
    /// and more than half is left (no takeover can happen before expiry, checked on the clock).
    ///
    /// Errors: [`Error::LeaseLost`] when the lock file changed or vanished; [`Error::LeaseExpired`]
    /// when unchanged but expired; [`Error::Interrupted`] once a stop was requested.
    pub async fn confirm(&mut self) -> Result<()> {
        self.check_stop()?;
        if let Some((sent, sent_mono)) = self.ahead.take() {
            let now = self.clock.now();
            let age = now - sent;
            let fresh = age >= chrono::Duration::zero()
                && age <= chrono_len(CONFIRM_AHEAD_MAX_AGE)
                && sent_mono.elapsed() <= CONFIRM_AHEAD_MAX_AGE;
            if fresh && self.lease.expires_at - now > chrono_len(self.length / 2) {
                return Ok(());
            }
        }
        self.confirm_now().await
    }

    /// Confirms the lease now for the next [`LeaseGuard::confirm`] to take ([`Fence::beside`]).
    /// Errors: as [`LeaseGuard::confirm`].
    pub async fn confirm_ahead(&mut self) -> Result<()> {
        let sent = (self.clock.now(), std::time::Instant::now());
        self.confirm_now().await?;
        self.ahead = Some(sent);
        Ok(())
    }

    async fn confirm_now(&mut self) -> Result<()> {
        self.ahead = None;
        let lost = || Error::LeaseLost {
            bucket: self.store.bucket().to_string(),
            key: LOCK_KEY.to_string(),
        };
        let current = self.store.get_opt(LOCK_KEY).await?.ok_or_else(lost)?;
        // A signal that came while the GET was under way counts too.
        self.check_stop()?;
        if !etag_eq(&current.etag, &self.etag) {
            return Err(lost());
        }
        let now = self.clock.now();
        if now >= self.lease.expires_at {
            return Err(Error::LeaseExpired {
                bucket: self.store.bucket().to_string(),
                key: LOCK_KEY.to_string(),
                expired_at: self.lease.expires_at.to_rfc3339(),
                lease_seconds: self.length.as_secs(),
            });
        }
        if self.lease.expires_at - now < chrono_len(self.length / 2) {
            let renewed = Lease { expires_at: now + chrono_len(self.length), ..self.lease.clone() };
            let body = serde_json::to_vec_pretty(&renewed).expect("lease serialises");
            let update = PutMode::Update(self.etag.clone());
            self.etag =
                put_settled(&self.store, LOCK_KEY, body, update).await.map_err(|e| match e {
                    Error::PreconditionFailed { .. } => lost(),
                    e => e,
                })?;
            self.lease = renewed;
            tracing::debug!(expires_at = %self.lease.expires_at, "lease renewed");
        }
        Ok(())
    }

    /// Releases the lease (DeleteObject `If-Match` our ETag, so a lease taken over is left alone)
    /// within [`LEASE_RELEASE_TIMEOUT`].
    /// Errors: [`Error::LeaseNotReleased`] (the lease holds until it lapses).
    pub async fn release(self) -> Result<()> {
        let store = self.store.until(Some(std::time::Instant::now() + LEASE_RELEASE_TIMEOUT));
        match store.delete(LOCK_KEY, Some(&self.etag)).await {
            Ok(()) | Err(Error::PreconditionFailed { .. }) => Ok(()),
            Err(e) => Err(Error::LeaseNotReleased {
                bucket: store.bucket().to_string(),
                holder: self.lease.holder.clone(),
                expires_at: self.lease.expires_at.to_rfc3339(),
                reason: e.to_string(),
            }),
        }
    }
}

/// A lease without its store type, for [`Fence`].
pub trait Confirm: std::fmt::Debug + Send {
    /// [`LeaseGuard::confirm`], boxed.
    fn confirm_boxed(&mut self) -> futures::future::BoxFuture<'_, Result<()>>;
    /// [`LeaseGuard::confirm_ahead`], boxed.
    fn confirm_ahead_boxed(&mut self) -> futures::future::BoxFuture<'_, Result<()>>;
    /// [`Error::Interrupted`] once a stop was requested, without a request.
    fn check_stop(&self) -> Result<()>;
}

impl<S: Store + Clone + std::fmt::Debug + 'static> Confirm for LeaseGuard<S> {
    fn confirm_boxed(&mut self) -> futures::future::BoxFuture<'_, Result<()>> {
        Box::pin(self.confirm())
    }
    fn confirm_ahead_boxed(&mut self) -> futures::future::BoxFuture<'_, Result<()>> {
        Box::pin(self.confirm_ahead())
    }
    fn check_stop(&self) -> Result<()> {
        LeaseGuard::check_stop(self)
    }
}

/// Confirms the lease, when there is one, before each destructive step.
#[derive(Debug)]
pub struct Fence<'a>(pub Option<&'a mut dyn Confirm>);

impl Fence<'_> {
    /// [`LeaseGuard::confirm`], or nothing without a lease.
    pub async fn check(&mut self) -> Result<()> {
        match self.0.as_deref_mut() {
            Some(l) => l.confirm_boxed().await,
            None => Ok(()),
        }
    }

    /// Runs `step` while the lease is confirmed beside it, so the next [`Fence::check`] costs no
    /// round trip. `step` must be a request the lease does not guard: a read, the manifest's create
    /// (recovery undoes it) or its delete once the inputs are gone, or a step already checked.
    ///
    /// Errors: [`Error::LeaseLost`] (wins over `step`'s result), else `step`'s.
    pub async fn beside<T>(&mut self, step: impl Future<Output = Result<T>>) -> Result<T> {
        match self.0.as_deref_mut() {
            Some(l) => {
                l.check_stop()?;
                // Boxed: beside a re-list, the pair is kilobytes of future, too much for a 2 MB
                // test thread's stack in debug builds.
                let (out, confirmed) = futures::join!(Box::pin(step), l.confirm_ahead_boxed());
                confirmed?;
                out
            }
            None => step.await,
        }
    }
}

fn held(store: &impl Store, holder: &str, expires_at: DateTime<Utc>) -> Error {
    Error::LeaseHeld {
        bucket: store.bucket().to_string(),
        key: LOCK_KEY.to_string(),
        holder: holder.to_string(),
        expires_at: expires_at.to_rfc3339(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::clock::ManualClock;
    use crate::infra::storage::MemoryStore;

    const LENGTH: Duration = Duration::from_secs(960);

    async fn held() -> (MemoryStore, ManualClock, LeaseGuard<MemoryStore>) {
        let clock = ManualClock::new("2026-07-22T04:50:00Z".parse().unwrap());
        let store = MemoryStore::with_clock("b", Arc::new(clock.clone()));
        let lease = LeaseGuard::acquire_with_clock(&store, Arc::new(clock.clone()), "me", LENGTH)
            .await
            .unwrap();
        (store, clock, lease)
    }

    /// Overwrites `lock.json` (a new ETag), as a takeover or a hand would.
    async fn change_lock_by_hand(store: &MemoryStore, lease: &LeaseGuard<MemoryStore>) {
        store
            .put(LOCK_KEY, b"{}".to_vec().into(), PutMode::Update(lease.etag.clone()), None)
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_confirmation_taken_ahead_saves_the_next_confirms_get_only() {
        let (store, clock, mut lease) = held().await;
        lease.confirm().await.unwrap();
        assert_eq!(store.requests("GetObject"), 1, "confirm alone GETs lock.json");
        lease.confirm_ahead().await.unwrap();
        assert_eq!(store.requests("GetObject"), 2);
        clock.advance(Duration::from_secs(2));
        lease.confirm().await.unwrap();
        assert_eq!(store.requests("GetObject"), 2, "taken from the confirmation ahead");
        lease.confirm().await.unwrap();
        assert_eq!(store.requests("GetObject"), 3, "taken once, not twice");
    }

    #[tokio::test]
    async fn a_stale_confirmation_ahead_is_not_taken() {
        let (store, clock, mut lease) = held().await;
        lease.confirm_ahead().await.unwrap();
        clock.advance(CONFIRM_AHEAD_MAX_AGE + Duration::from_secs(1));
        // Changed by hand meanwhile: only a GET of its own can see it.
        change_lock_by_hand(&store, &lease).await;
        let e = lease.confirm().await.unwrap_err();
        assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
    }

    #[tokio::test]
    async fn past_half_the_lease_a_confirmation_ahead_is_not_taken_and_the_lease_renews() {
        let (store, clock, mut lease) = held().await;
        clock.advance(LENGTH / 2 - Duration::from_secs(1));
        lease.confirm_ahead().await.unwrap();
        let (gets, puts) = (store.requests("GetObject"), store.requests("PutObject"));
        clock.advance(Duration::from_secs(2));
        lease.confirm().await.unwrap();
        assert_eq!(store.requests("GetObject"), gets + 1);
        assert_eq!(store.requests("PutObject"), puts + 1, "renewed");
        assert!(lease.lease.expires_at > clock.now() + chrono_len(LENGTH / 2));
    }

    /// "More than half of the lease left", exactly: at half, the
    /// confirmation taken ahead is not enough; the lock file is read again.
    #[tokio::test]
    async fn at_exactly_half_the_lease_left_a_confirmation_ahead_is_not_taken() {
        let (store, clock, mut lease) = held().await;
        clock.advance(LENGTH / 2 - Duration::from_secs(1));
        lease.confirm_ahead().await.unwrap();
        let (gets, puts) = (store.requests("GetObject"), store.requests("PutObject"));
        clock.advance(Duration::from_secs(1));
        assert_eq!(lease.lease.expires_at - clock.now(), chrono_len(LENGTH / 2));
        lease.confirm().await.unwrap();
        assert_eq!(store.requests("GetObject"), gets + 1, "not taken ahead");
        // Renewed once less than half is left, not at half.
        assert_eq!(store.requests("PutObject"), puts, "renewed at half");
    }

    #[tokio::test]
    async fn a_clock_moved_past_the_expiry_makes_the_confirmation_ahead_stale_and_the_lease_lost() {
        let (store, clock, mut lease) = held().await;
        lease.confirm_ahead().await.unwrap();
        let gets = store.requests("GetObject");
        clock.advance(LENGTH);
        let e = lease.confirm().await.unwrap_err();
        // Nobody took it over: it expired under this run, and says so.
        assert!(matches!(e, Error::LeaseExpired { .. }), "{e}");
        assert!(e.to_string().contains("expired under this run"), "{e}");
        assert_eq!(store.requests("GetObject"), gets + 1, "a GET of its own");
    }

    #[tokio::test]
    async fn a_clock_stepped_back_does_not_make_a_confirmation_ahead_fresh() {
        let (store, clock, mut lease) = held().await;
        lease.confirm_ahead().await.unwrap();
        // NTP steps the clock back 10 minutes; meanwhile the lock file was
        // changed (taken over, or by hand): only a GET can see it.
        clock.set(clock.now() - chrono::Duration::minutes(10));
        change_lock_by_hand(&store, &lease).await;
        let e = lease.confirm().await.unwrap_err();
        assert!(matches!(e, Error::LeaseLost { .. }), "{e}");
    }

    /// The boundaries of another holder's lock, exactly: a lock that
    /// expires just now is taken over; one that lasts exactly the longest a
    /// run holds one (LEASE_SECONDS + 900 s) is held, not implausible.
    #[tokio::test]
    async fn a_lock_at_its_expiry_is_taken_over_and_one_at_the_plausible_maximum_is_held() {
        let now: DateTime<Utc> = "2026-07-22T04:50:00Z".parse().unwrap();
        let clock = ManualClock::new(now);
        let lock = |expires_at| Lease {
            holder: "other".into(),
            acquired_at: now - chrono::Duration::minutes(16),
            expires_at,
        };
        for (expires_at, taken) in
            [(now, true), (now + chrono_len(max_plausible_lease(LENGTH)), false)]
        {
            let store = MemoryStore::with_clock("b", Arc::new(clock.clone()));
            let body = serde_json::to_vec(&lock(expires_at)).unwrap();
            store.put(LOCK_KEY, body.into(), PutMode::Create, None).await.unwrap();
            let r =
                LeaseGuard::acquire_with_clock(&store, Arc::new(clock.clone()), "me", LENGTH).await;
            match (taken, r) {
                (true, Ok(g)) => assert_eq!(g.lease.holder, "me"),
                (false, Err(e)) => assert!(matches!(e, Error::LeaseHeld { .. }), "{e}"),
                (_, r) => panic!("expires at {expires_at}: {r:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_lease_longer_than_any_run_holds_is_refused_not_waited_for() {
        let clock = ManualClock::new("2026-07-22T04:50:00Z".parse().unwrap());
        let store = MemoryStore::with_clock("b", Arc::new(clock.clone()));
        let forever = Lease {
            holder: "hand".into(),
            acquired_at: "2026-07-22T04:00:00Z".parse().unwrap(),
            expires_at: "2036-07-22T04:00:00Z".parse().unwrap(),
        };
        let body = serde_json::to_vec(&forever).unwrap();
        store.put(LOCK_KEY, body.into(), PutMode::Create, None).await.unwrap();
        let e = LeaseGuard::acquire_with_clock(&store, Arc::new(clock.clone()), "me", LENGTH)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::LeaseImplausible { .. }), "{e}");
        assert!(e.to_string().contains("remove _compaction_state/lock.json"), "{e}");
        // Left as it was.
        let now = store.get_opt(LOCK_KEY).await.unwrap().unwrap();
        assert_eq!(serde_json::from_slice::<Lease>(&now.body).unwrap(), forever);
        // A lease within LEASE_SECONDS + 15 minutes is a live one.
        let (store, clock, _held) = held().await;
        clock.advance(Duration::from_secs(1));
        let e = LeaseGuard::acquire_with_clock(&store, Arc::new(clock), "other", LENGTH)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::LeaseHeld { .. }), "{e}");
    }

    #[tokio::test]
    async fn a_create_or_renewal_whose_answer_was_lost_is_recognised_as_this_runs() {
        let clock = ManualClock::new("2026-07-22T04:50:00Z".parse().unwrap());
        let store = MemoryStore::with_clock("b", Arc::new(clock.clone()));
        // The create applied, its retry refused (412): the lock is ours.
        let mut lease = LeaseGuard::acquire_with_clock(
            &store.lose_answers(),
            Arc::new(clock.clone()),
            "me",
            LENGTH,
        )
        .await
        .unwrap();
        assert_eq!(lease.lease.holder, "me");
        // The renewal applied, its retry refused (412): still ours.
        clock.advance(LENGTH / 2 + Duration::from_secs(1));
        lease.confirm().await.unwrap();
        assert!(lease.lease.expires_at > clock.now() + chrono_len(LENGTH / 2));
        lease.confirm().await.unwrap();
        lease.release().await.unwrap();
        assert!(store.get_opt(LOCK_KEY).await.unwrap().is_none(), "released");
        // Someone else's lock is still someone else's.
        let (store, clock, _held) = held().await;
        clock.advance(Duration::from_secs(1));
        let e =
            LeaseGuard::acquire_with_clock(&store.lose_answers(), Arc::new(clock), "other", LENGTH)
                .await
                .unwrap_err();
        assert!(matches!(e, Error::LeaseHeld { ref holder, .. } if holder == "me"), "{e}");
    }

    #[tokio::test]
    async fn once_a_stop_is_requested_no_confirmation_is_given() {
        let (_store, _clock, mut lease) = held().await;
        let stop = Stop::new();
        lease.stop_on(stop.clone());
        lease.confirm().await.unwrap();
        stop.request("SIGTERM");
        let e = lease.confirm().await.unwrap_err();
        assert!(matches!(e, Error::Interrupted { signal: "SIGTERM", .. }), "{e}");
        lease.release().await.unwrap();
    }

    /// Once a stop is asked for, a write that would go beside a
    /// confirmation (the manifest's create) does not start at all, and the
    /// fence refuses every step.
    #[tokio::test]
    async fn a_stop_refuses_a_write_beside_a_confirmation_before_it_starts() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let (_store, _clock, mut lease) = held().await;
        let stop = Stop::new();
        lease.stop_on(stop.clone());
        let mut fence = Fence(Some(&mut lease));
        let started = AtomicBool::new(false);
        let step = || async {
            started.store(true, Ordering::SeqCst);
            Ok(())
        };
        fence.beside(step()).await.unwrap();
        assert!(started.swap(false, Ordering::SeqCst));
        stop.request("SIGTERM");
        let e = fence.beside(step()).await.unwrap_err();
        assert!(matches!(e, Error::Interrupted { signal: "SIGTERM", .. }), "{e}");
        assert!(!started.load(Ordering::SeqCst), "the write started");
        let e = fence.check().await.unwrap_err();
        assert!(matches!(e, Error::Interrupted { .. }), "{e}");
    }

    /// A [`MemoryStore`] that records the deadline each [`Store::until`] is given.
    #[derive(Debug, Clone)]
    struct Deadlines(MemoryStore, Arc<std::sync::Mutex<Vec<Option<std::time::Instant>>>>);

    impl Store for Deadlines {
        fn bucket(&self) -> &str {
            self.0.bucket()
        }
        fn delete_batch_size(&self) -> usize {
            self.0.delete_batch_size()
        }
        fn until(&self, deadline: Option<std::time::Instant>) -> Self {
            self.1.lock().unwrap().push(deadline);
            self.clone()
        }
        async fn list(&self, prefix: &str) -> Result<Vec<crate::infra::storage::ObjectMeta>> {
            self.0.list(prefix).await
        }
        async fn list_prefixes(&self, prefix: &str) -> Result<Vec<String>> {
            self.0.list_prefixes(prefix).await
        }
        async fn list_page(
            &self,
            prefix: &str,
            start_after: Option<&str>,
        ) -> Result<crate::infra::storage::ListPage> {
            self.0.list_page(prefix, start_after).await
        }
        async fn get(&self, key: &str) -> Result<crate::infra::storage::Fetched> {
            self.0.get(key).await
        }
        async fn head(&self, key: &str) -> Result<Option<crate::infra::storage::Head>> {
            self.0.head(key).await
        }
        async fn put_object(
            &self,
            key: &str,
            body: bytes::Bytes,
            request: crate::infra::storage::PutRequest,
        ) -> Result<String> {
            self.0.put_object(key, body, request).await
        }
        async fn delete(&self, key: &str, if_match: Option<&str>) -> Result<()> {
            self.0.delete(key, if_match).await
        }
        async fn delete_batch(
            &self,
            batch: &[(String, String)],
        ) -> Result<Vec<crate::infra::storage::DeleteFailure>> {
            self.0.delete_batch(batch).await
        }
    }

    /// The release is bounded by a deadline [`LEASE_RELEASE_TIMEOUT`] after
    /// it starts (S3 refuses nothing before then), and it deletes the lock.
    #[tokio::test]
    async fn a_release_is_given_its_timeout_from_when_it_starts() {
        let store = Deadlines(MemoryStore::new("b"), Default::default());
        let lease = LeaseGuard::acquire(&store, "me", LENGTH).await.unwrap();
        store.1.lock().unwrap().clear();
        let before = std::time::Instant::now();
        lease.release().await.unwrap();
        let after = std::time::Instant::now();
        let given = store.1.lock().unwrap().clone();
        let [Some(deadline)] = given[..] else { panic!("{given:?}") };
        assert!(deadline >= before + LEASE_RELEASE_TIMEOUT, "{deadline:?} {before:?}");
        assert!(deadline <= after + LEASE_RELEASE_TIMEOUT, "{deadline:?} {after:?}");
        assert!(!store.0.snapshot().contains_key(LOCK_KEY), "the lock is deleted");
    }
}
