//! S3's error answers as one-line texts for errors and reports.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

/// What an HTTP status means from S3, for an error whose response carried no message (a HEAD's
/// never does): S3's own names where it has them (S3 API reference, "Error responses": 503
/// `SlowDown`, 500 `InternalError`).
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

pub(super) fn no_message(status: Option<u16>) -> String {
    match status {
        Some(s) => format!("{} (the server sent no message)", status_meaning(s)),
        None => "(the server sent no message)".into(),
    }
}

/// An AWS SDK error as one line. A service error carries its HTTP status
/// because some servers answer in a shape the SDK reads no code from.
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

/// Its `Display` with every source (a dispatch failure's chain names the
/// cause), at most 300 characters.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    for cause in std::iter::successors(e.source(), |c| c.source()) {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
    }
    let s = one_line_text(&s);
    match s.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}
