//! The lease: one invocation at a time works on a bucket.
//!
//! `_compaction_state/lock.json` is created with `If-None-Match: *`; an
//! expired lease is taken over with `If-Match` on the ETag it was read with.
//! The holder renews it (again `If-Match`) once half of it has elapsed and
//! confirms it still holds it before every destructive step
//! ([`LeaseGuard::confirm`]), so a run that lost its lease stops instead of
//! racing the new holder. Lease times are wall-clock times (UTC): they are
//! about real elapsed time, not the pinned invocation time. The wall clock
//! is read through a [`Clock`] ([`LeaseGuard::acquire_with_clock`]), so the
//! simulation can move it past an expiry.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::clock::{self, Clock};
use crate::error::{Error, Result};
use crate::keys::LOCK_KEY;
use crate::storage::{PutMode, S3Store, Store, etag_eq};

/// `lock.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Holder id (the invocation id).
    pub holder: String,
    /// When the holder first took it (UTC).
    pub acquired_at: DateTime<Utc>,
    /// When it lapses unless renewed (UTC).
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
}

fn chrono_len(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

impl<S: Store + Clone> LeaseGuard<S> {
    /// [`LeaseGuard::acquire_with_clock`] on the system clock.
    pub async fn acquire(store: &S, holder: &str, length: Duration) -> Result<LeaseGuard<S>> {
        Self::acquire_with_clock(store, clock::system(), holder, length).await
    }

    /// Takes the lease for `holder` for `length`, reading the time from `clock`.
    ///
    /// Errors: [`Error::LeaseHeld`] when another holder's lease has not
    /// expired (or another invocation won the race to take it over); S3
    /// errors as they come. A lock file that cannot be parsed is taken over
    /// by its ETag, like an expired one (S3 PUTs are atomic, so it was
    /// written that way, not torn).
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
        match store
            .put(LOCK_KEY, body.clone().into(), PutMode::Create, None)
            .await
        {
            Ok(etag) => {
                return Ok(LeaseGuard {
                    store: store.clone(),
                    clock,
                    lease,
                    etag,
                    length,
                });
            }
            Err(Error::PreconditionFailed { .. }) => {}
            Err(e) => return Err(e),
        }
        // Someone holds it, or held it and died: take it over only if expired.
        let Some(current) = store.get_opt(LOCK_KEY).await? else {
            // Released between our two calls: try the create once more.
            let etag = store
                .put(LOCK_KEY, body.into(), PutMode::Create, None)
                .await
                .map_err(|e| match e {
                    Error::PreconditionFailed { .. } => held(store, "another invocation", now),
                    e => e,
                })?;
            return Ok(LeaseGuard {
                store: store.clone(),
                clock,
                lease,
                etag,
                length,
            });
        };
        let existing: Option<Lease> = serde_json::from_slice(&current.body).ok();
        if let Some(l) = &existing {
            if l.expires_at > now {
                return Err(held(store, &l.holder, l.expires_at));
            }
            tracing::warn!(previous_holder = %l.holder, expired_at = %l.expires_at, "taking over an expired lease");
        } else {
            tracing::warn!(
                key = LOCK_KEY,
                "lease file is unreadable; taking it over by ETag"
            );
        }
        let etag = store
            .put(LOCK_KEY, body.into(), PutMode::Update(current.etag), None)
            .await
            .map_err(|e| match e {
                Error::PreconditionFailed { .. } => {
                    held(store, "another invocation (it took the lease first)", now)
                }
                e => e,
            })?;
        Ok(LeaseGuard {
            store: store.clone(),
            clock,
            lease,
            etag,
            length,
        })
    }

    /// The lease as held.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Confirms the lease is still ours before a destructive step, renewing it
    /// when half of it has elapsed. Costs one GetObject (plus one PutObject
    /// when renewing).
    ///
    /// Errors: [`Error::LeaseLost`] when the lock file changed or vanished.
    pub async fn confirm(&mut self) -> Result<()> {
        let lost = || Error::LeaseLost {
            bucket: self.store.bucket().to_string(),
            key: LOCK_KEY.to_string(),
        };
        let current = self.store.get_opt(LOCK_KEY).await?.ok_or_else(lost)?;
        if !etag_eq(&current.etag, &self.etag) {
            return Err(lost());
        }
        let now = self.clock.now();
        if now >= self.lease.expires_at {
            return Err(lost());
        }
        let half = chrono_len(self.length / 2);
        if self.lease.expires_at - now < half {
            let renewed = Lease {
                expires_at: now + chrono_len(self.length),
                ..self.lease.clone()
            };
            let body = serde_json::to_vec_pretty(&renewed).expect("lease serialises");
            self.etag = self
                .store
                .put(
                    LOCK_KEY,
                    body.into(),
                    PutMode::Update(self.etag.clone()),
                    None,
                )
                .await
                .map_err(|e| match e {
                    Error::PreconditionFailed { .. } => lost(),
                    e => e,
                })?;
            self.lease = renewed;
            tracing::debug!(expires_at = %self.lease.expires_at, "lease renewed");
        }
        Ok(())
    }

    /// Releases the lease (DeleteObject with `If-Match` on our ETag, so a
    /// lease someone else took over is left alone).
    pub async fn release(self) -> Result<()> {
        match self.store.delete(LOCK_KEY, Some(&self.etag)).await {
            Ok(()) | Err(Error::PreconditionFailed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// A lease that can be confirmed before a destructive step, without naming
/// its store type ([`crate::commit::Fence`] holds one).
pub trait Confirm: std::fmt::Debug + Send {
    /// [`LeaseGuard::confirm`], boxed.
    fn confirm_boxed(&mut self) -> futures::future::BoxFuture<'_, Result<()>>;
}

impl<S: Store + Clone + std::fmt::Debug + 'static> Confirm for LeaseGuard<S> {
    fn confirm_boxed(&mut self) -> futures::future::BoxFuture<'_, Result<()>> {
        Box::pin(self.confirm())
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
