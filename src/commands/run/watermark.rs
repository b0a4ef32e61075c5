//! The watermark file's bookkeeping for the driver: report fields, advance, recorded mismatch.

use crate::data::spill::UuidSet;
use chrono::NaiveDate;

use super::Ctx;
use crate::data::report::{RunReport, Status, StopReason};
use crate::data::state::WatermarkState;
use crate::infra::error::Result;
use crate::infra::storage::Store;
use crate::protocol::commit;
use crate::protocol::plan::watermark_lag_days;

/// The report's watermark fields from `wm`; without a watermark the lag counts from `first`
/// ([`watermark_lag_days`]).
pub(super) fn fill_watermark_fields(
    report: &mut RunReport,
    wm: &WatermarkState,
    cutoff: NaiveDate,
    first: Option<NaiveDate>,
) {
    let last = wm.watermark.last_compacted_date;
    report.last_compacted_date = last;
    report.mismatch_runs = wm.watermark.mismatch_runs;
    report.watermark_lag_days = Some(watermark_lag_days(last, first, cutoff));
}

/// Deletes the manifests of [`Ctx::finished_manifests`].
pub(super) async fn delete_finished_manifests(cx: &mut Ctx<'_, '_, impl Store>) -> Result<()> {
    let finished = std::mem::take(&mut cx.finished_manifests);
    delete_manifests(cx.store, &finished).await
}

async fn delete_manifests(store: &impl Store, keys: &[String]) -> Result<()> {
    for key in keys {
        commit::delete_manifest(store, key).await?;
    }
    Ok(())
}

/// Advances the watermark to `date` and writes it (`If-Match`, the lease confirmed first) beside
/// the finished manifests' deletes: it may land before a complete commit's manifest is gone, never
/// before the commit is complete. A failed delete does not undo a written watermark.
pub(super) async fn write_watermark(
    cx: &mut Ctx<'_, '_, impl Store>,
    wm: &mut WatermarkState,
    date: NaiveDate,
) -> (Result<()>, Result<()>) {
    let (store, clock) = (cx.store, cx.opts.clock.clone());
    let finished = std::mem::take(&mut cx.finished_manifests);
    let fence = &mut cx.fence;
    let manifests = delete_manifests(store, &finished);
    let watermark = async {
        fence.check().await?;
        wm.watermark.advance(date);
        crate::failpoint!("run::before-watermark-write");
        // `updated_at`: the lease's clock, not the invocation time.
        wm.write(store, clock.now()).await
    };
    let (manifests, watermark) = tokio::join!(manifests, watermark);
    (watermark, manifests)
}

/// The walk reached the cutoff: a recorded mismatch is over. Not for `--date` or a dry run.
pub(super) async fn clear_mismatch_if_passed(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    wm: &mut WatermarkState,
    cutoff: NaiveDate,
) -> Result<()> {
    if cx.opts.dry_run || cx.opts.only_date.is_some() {
        return Ok(());
    }
    if wm.watermark.clear_mismatch() {
        wm.write(cx.store, cx.opts.clock.now()).await?;
    }
    fill_watermark_fields(report, wm, cutoff, cx.first);
    Ok(())
}

/// Parity failed on `date`, where the walk stops: recorded in the report and counted in
/// `mismatch_runs` (once per event), but not for `--date` or a dry run (see `days[]`).
pub(super) async fn record_mismatch(
    cx: &mut Ctx<'_, '_, impl Store>,
    report: &mut RunReport,
    wm: &mut WatermarkState,
    date: NaiveDate,
    missing: UuidSet,
) -> Result<()> {
    let opts = cx.opts;
    let first = missing.first(crate::data::report::MISMATCH_UUIDS_SHOWN)?;
    let (count, first_uuid) = (missing.len(), first.first().copied().unwrap_or_default());
    report.last_run_status = Status::Mismatch;
    report.stop_reason = StopReason::Mismatch;
    if opts.dry_run || opts.only_date.is_some() {
        tracing::warn!(%date, missing = count, first = %first_uuid, "parity mismatch (not recorded: --date or a dry run)");
        return Ok(());
    }
    report.set_mismatch(date, count, &first);
    tracing::warn!(%date, missing = count, first = %first_uuid, "parity mismatch: flights without index rows; the walk stops here");
    let event = opts.event_id.clone().unwrap_or_else(|| opts.invocation_id.clone());
    report.mismatch_runs = wm.watermark.record_mismatch(date, &event);
    cx.fence.check().await?;
    wm.write(cx.store, opts.clock.now()).await?;
    Ok(())
}
