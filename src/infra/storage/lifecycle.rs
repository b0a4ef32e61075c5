//! The bucket's versioning and lifecycle rules, for `status`
//! (docs/deploying.md, "Versioned buckets").

use super::S3Store;
use crate::infra::error::Result;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::types::{ExpirationStatus, LifecycleRule};

/// What `status` needs of the bucket's configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BucketLifecycle {
    /// `Enabled` or `Suspended`; `None` when versioning was never turned on
    /// (S3 then returns no `Status`).
    pub versioning: Option<String>,
    /// The enabled lifecycle rules.
    pub rules: Vec<LifecycleRuleSummary>,
}

/// One enabled lifecycle rule, as far as versions and delete markers go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LifecycleRuleSummary {
    /// The rule's `ID` (empty when it has none).
    pub id: String,
    /// The key prefix it applies to (`Filter.Prefix`, `Filter.And.Prefix`
    /// or the legacy rule-level `Prefix`; empty: the whole bucket).
    pub prefix: String,
    /// False when the rule also filters on tags or object size: it then
    /// covers only some objects under its prefix.
    pub every_object: bool,
    /// `Expiration` with `Days` or `Date`: current objects expire.
    pub expires_current: bool,
    /// `NoncurrentVersionExpiration.NoncurrentDays`.
    pub noncurrent_days: Option<i32>,
    /// `Expiration.ExpiredObjectDeleteMarker` is true.
    pub expired_delete_markers: bool,
}

impl LifecycleRuleSummary {
    /// True when the rule applies to every object under `prefix`.
    pub fn covers(&self, prefix: &str) -> bool {
        self.every_object && prefix.starts_with(&self.prefix)
    }
}

fn summary(rule: &LifecycleRule) -> Option<LifecycleRuleSummary> {
    if rule.status() != &ExpirationStatus::Enabled {
        return None;
    }
    let filter = rule.filter();
    let and = filter.and_then(|f| f.and());
    #[allow(deprecated)] // the rule-level Prefix of older configurations
    let prefix = filter
        .and_then(|f| f.prefix())
        .or_else(|| and.and_then(|a| a.prefix()))
        .or_else(|| rule.prefix())
        .unwrap_or_default();
    let every_object = filter.is_none_or(|f| {
        f.tag().is_none()
            && f.object_size_greater_than().is_none()
            && f.object_size_less_than().is_none()
            && and.is_none_or(|a| {
                a.tags().is_empty()
                    && a.object_size_greater_than().is_none()
                    && a.object_size_less_than().is_none()
            })
    });
    let expiration = rule.expiration();
    Some(LifecycleRuleSummary {
        id: rule.id().unwrap_or_default().to_string(),
        prefix: prefix.to_string(),
        every_object,
        expires_current: expiration.is_some_and(|e| e.days().is_some() || e.date().is_some()),
        noncurrent_days: rule.noncurrent_version_expiration().and_then(|n| n.noncurrent_days()),
        expired_delete_markers: expiration
            .and_then(|e| e.expired_object_delete_marker())
            .unwrap_or(false),
    })
}

impl S3Store {
    /// The bucket's versioning state and enabled lifecycle rules. Errors: S3's (AccessDenied
    /// without the two read permissions); no lifecycle configuration is no error.
    pub async fn bucket_lifecycle(&self) -> Result<BucketLifecycle> {
        // The rules first: a denial names the first permission missing.
        let sent = self.client.get_bucket_lifecycle_configuration().bucket(&self.bucket).send();
        let rules = match sent.await {
            Ok(out) => out.rules().iter().filter_map(summary).collect(),
            Err(e) if e.code() == Some("NoSuchLifecycleConfiguration") => Vec::new(),
            Err(e) => return Err(self.err("GetBucketLifecycleConfiguration", "", e)),
        };
        let sent = self.client.get_bucket_versioning().bucket(&self.bucket).send();
        let versioning = self.answer("GetBucketVersioning", "", sent).await?;
        let versioning = versioning.status().map(|s| s.as_str().to_string());
        Ok(BucketLifecycle { versioning, rules })
    }
}
