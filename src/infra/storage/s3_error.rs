//! How S3's answers become this crate's [`Error`]s and one-line texts:
//! the status's meaning, a service error's code and message, the SDK's
//! error chain folded into one line for a report.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// What an HTTP status means from S3, for an error whose response carried
/// no message (a HEAD's never does): S3's own names where it has them
/// (S3 API reference, "Error responses": 503 `SlowDown`, 500
/// `InternalError`).
pub fn status_meaning(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden (access denied)",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Slow Down",
        504 => "Gateway Timeout",
        s if s >= 500 => "a server error",
        _ => "an error",
    }
}

/// An S3 error's message when the response carried none: the status's
/// meaning ([`status_meaning`]) and that the server said nothing more.
pub(super) fn no_message(status: Option<u16>) -> String {
    match status {
        Some(s) => format!("{} (the server sent no message)", status_meaning(s)),
        None => "(the server sent no message)".into(),
    }
}

/// An AWS SDK error as one line for a report: `{code}: {message} (HTTP
/// {status})` for a service error (the status because some servers answer
/// in a shape the SDK reads no code from), else [`one_line`]. The SDK's own
/// dump goes to the debug log only.
pub fn sdk_error_line<E>(e: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    tracing::debug!(error = ?e, "AWS SDK error in full");
    match e {
        SdkError::ServiceError(se) => {
            let err = se.err();
            let code = err.code().unwrap_or("Unknown");
            let message = err.message().map(one_line_text).unwrap_or_default();
            let status = se.raw().status().as_u16();
            format!("{code}: {message} (HTTP {status})")
        }
        other => one_line(other),
    }
}

fn one_line_text(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An SDK error as one line: its `Display` with every source, newlines
/// folded, at most 300 characters (a dispatch failure's source chain names
/// the cause, e.g. "Connection refused").
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}
