//! Untrusted text (keys, field names, setting values) made safe for a message or log line: control
//! characters escaped, length bounded. An S3 key may hold any UTF-8 character but NUL (S3 user
//! guide, "Naming Amazon S3 objects"): raw, a newline forges a log line and an ESC drives the
//! reader's terminal. CloudWatch Logs cuts an event at 256 KB. A list shown is [`Shortened`].
//!
//! ```
//! use archive_compaction::infra::text::{escape, quote, QUOTED_CHARS_MAX};
//! assert_eq!(quote("flights/2026/07/20/a\x1bb\n.json"), r#""flights/2026/07/20/a\u{1b}b\n.json""#);
//! assert_eq!(escape("day=20/x\x01y"), r"day=20/x\u{1}y");
//! let long = "x".repeat(5_000);
//! assert_eq!(quote(&long), format!("\"{}\"…(5000 bytes)", "x".repeat(QUOTED_CHARS_MAX)));
//! ```

/// Characters of an input a message quotes; the rest becomes `…(N bytes)`,
/// N the input's whole length.
pub const QUOTED_CHARS_MAX: usize = 1024;

const LOG_FIELD_BYTES_MAX: usize = 32 * 1024;

/// A character a terminal or log parser would act on: Unicode category Cc,
/// or a line or paragraph separator (U+2028, U+2029).
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Seconds rounded to the millisecond, for a log line (`1.383`, not `1.3829521630000001`).
pub fn millis(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// What a date's commit did, for its log line: files, rows and bytes before → after.
pub fn before_after(
    files: u64,
    bytes_read: u64,
    rows: u64,
    outputs: u64,
    bytes_written: u64,
) -> String {
    use indicatif::HumanBytes;
    format!(
        "{files} index files ({}) → {outputs} compacted file{} ({}), {rows} rows",
        HumanBytes(bytes_read),
        if outputs == 1 { "" } else { "s" },
        HumanBytes(bytes_written)
    )
}

/// `s` quoted as Rust's `Debug` writes a string, cut at [`QUOTED_CHARS_MAX`] characters.
pub fn quote(s: &str) -> String {
    let (head, rest) = split_at_chars(s, QUOTED_CHARS_MAX);
    format!("{head:?}{rest}")
}

/// [`quote`] without the quotes, escaping only [`is_unsafe`] characters: for
/// keys printed bare (`s3://bucket/key`).
pub fn escape(s: &str) -> String {
    let (head, rest) = split_at_chars(s, QUOTED_CHARS_MAX);
    let mut out = String::with_capacity(head.len() + 16);
    head.chars().for_each(|c| push_escaped(&mut out, c));
    out + &rest
}

/// [`escape`] bounded to `max_bytes` of escaped text instead, before the suffix.
fn escape_bounded(s: &str, max_bytes: usize) -> String {
    if s.len() <= max_bytes && !s.chars().any(is_unsafe) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len().min(max_bytes) + 24);
    for c in s.chars() {
        let before = out.len();
        push_escaped(&mut out, c);
        if out.len() > max_bytes {
            out.truncate(before);
            out.push_str(&format!("…({} bytes)", s.len()));
            break;
        }
    }
    out
}

/// The CLI's text log's field formatter (the Lambda's JSON log escapes by itself).
pub fn log_fields() -> impl for<'w> tracing_subscriber::fmt::FormatFields<'w> + Send + Sync + 'static
{
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|w, field, value| {
        let v = escape_bounded(&format!("{value:?}"), LOG_FIELD_BYTES_MAX);
        if field.name() == "message" { write!(w, "{v}") } else { write!(w, "{field}={v}") }
    })
    .delimited(" ")
}

fn push_escaped(out: &mut String, c: char) {
    if is_unsafe(c) {
        out.extend(c.escape_default());
    } else {
        out.push(c);
    }
}

/// `s`'s first `max_chars` characters, and `…(N bytes)` when that leaves some out.
fn split_at_chars(s: &str, max_chars: usize) -> (&str, String) {
    match s.char_indices().nth(max_chars) {
        Some((i, _)) => (&s[..i], format!("…({} bytes)", s.len())),
        None => (s, String::new()),
    }
}

/// A list shown shortened, the one way the report, `status` and `audit` cut one: its first `cap`
/// entries in `shown`, beside their exact `total` and a `truncated` marker where the JSON has them.
pub struct Shortened<'a, T> {
    /// The entries shown.
    pub shown: &'a mut Vec<T>,
    total: Option<&'a mut u64>,
    truncated: Option<&'a mut bool>,
    /// The most entries shown.
    pub cap: usize,
    keep_last: bool,
}

impl<'a, T> Shortened<'a, T> {
    /// `shown`, at most `cap` entries, without a count or a marker.
    pub fn new(shown: &'a mut Vec<T>, cap: usize) -> Self {
        Shortened { shown, total: None, truncated: None, cap, keep_last: false }
    }

    /// With its exact count in `total` and, in `truncated`, whether entries were left out.
    pub fn counted(self, total: &'a mut u64, truncated: Option<&'a mut bool>) -> Self {
        Shortened { total: Some(total), truncated, ..self }
    }

    /// A cut keeps the last entry (`errors`: the one that stopped the run).
    pub fn keeping_last(self) -> Self {
        Shortened { keep_last: true, ..self }
    }

    /// Counts an entry, made by `item` only when there is room to show it.
    pub fn push_with(&mut self, item: impl FnOnce() -> T) {
        self.total.iter_mut().for_each(|t| **t += 1);
        let room = self.shown.len() < self.cap;
        self.truncated.iter_mut().for_each(|t| **t |= !room);
        if room {
            self.shown.push(item());
        }
    }

    /// Counts `item` and shows it if there is room; else hands it back.
    pub fn push(&mut self, item: T) -> Option<T> {
        let mut item = Some(item);
        self.push_with(|| item.take().expect("made once"));
        item
    }

    /// Shows the first `cap` of `first`, the first entries of `total`.
    pub fn set(&mut self, total: u64, first: impl Iterator<Item = T>) {
        self.shown.clear();
        self.total.iter_mut().for_each(|t| **t = 0);
        self.add(total, first);
    }

    /// Adds `total` entries to the count, showing those of `first` there is room for.
    pub fn add(&mut self, total: u64, first: impl Iterator<Item = T>) {
        self.shown.extend(first.take(self.cap.saturating_sub(self.shown.len())));
        self.total.iter_mut().for_each(|t| **t += total);
        self.cut(self.cap);
    }

    /// Counts at least the entries shown, shows `keep` of them, marked if fewer than its count.
    pub fn cut(&mut self, keep: usize) {
        let listed = self.shown.len() as u64;
        if self.shown.len() > keep {
            let last = self.shown.pop().filter(|_| self.keep_last && keep > 0);
            self.shown.truncate(keep - usize::from(last.is_some()));
            self.shown.extend(last);
        }
        let total = self.total.as_deref_mut().map_or(listed, |t| {
            *t = (*t).max(listed);
            *t
        });
        let left_out = total > self.shown.len() as u64;
        self.truncated.iter_mut().for_each(|t| **t = left_out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shortened list counts every entry, shows the first `cap` and is marked once one is left
    /// out; `set` starts over; a cut keeps the last entry when asked; a list without a count is
    /// cut all the same.
    #[test]
    fn a_shortened_list_counts_shows_its_first_entries_and_marks_a_cut() {
        let (mut shown, mut total, mut truncated) = (vec![], 0, false);
        let mut l = Shortened::new(&mut shown, 2).counted(&mut total, Some(&mut truncated));
        assert_eq!(l.push(1), None);
        l.push_with(|| 2);
        assert_eq!(l.push(3), Some(3));
        l.add(4, [4, 5].into_iter());
        assert_eq!((l.shown.clone(), total, truncated), (vec![1, 2], 7, true));
        let mut l = Shortened::new(&mut shown, 2).counted(&mut total, Some(&mut truncated));
        l.set(2, [7, 8, 9].into_iter());
        assert_eq!((shown.clone(), total, truncated), (vec![7, 8], 2, false));
        let (mut errors, mut n, mut cut) = (vec![1, 2, 3, 4], 0, false);
        Shortened::new(&mut errors, 2).counted(&mut n, Some(&mut cut)).keeping_last().cut(2);
        assert_eq!((errors, n, cut), (vec![1, 4], 4, true));
        let mut uncounted = vec![1, 2, 3];
        Shortened::new(&mut uncounted, 2).cut(2);
        assert_eq!(uncounted, [1, 2]);
    }

    #[test]
    fn the_text_log_escapes_and_bounds_every_field() {
        use tracing_subscriber::layer::SubscriberExt;
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let out = buf.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .fmt_fields(log_fields())
            .with_writer(move || out.clone());
        let key = "flights/2026/07/20/x\n2026-07-20T00:00:00Z ERROR forged\x1b[2J";
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), || {
            tracing::warn!(key = %key, big = %"y".repeat(100_000), "skipped {key}");
        });
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains('\x1b'), "{text}");
        assert!(text.contains(r"x\n2026-07-20T00:00:00Z ERROR forged\u{1b}[2J"), "{text}");
        assert!(text.len() < 3 * LOG_FIELD_BYTES_MAX, "{}", text.len());
    }

    #[test]
    fn log_figures_read_as_a_person_reads_them() {
        assert_eq!(format!("{:?}", millis(1.3829521630000001)), "1.383");
        assert_eq!(millis(0.0004), 0.0);
        assert_eq!(
            before_after(600, 1_258_291, 600, 1, 307_200),
            "600 index files (1.20 MiB) → 1 compacted file (300.00 KiB), 600 rows"
        );
        assert!(before_after(2, 0, 2, 2, 0).contains("→ 2 compacted files ("));
    }

    #[test]
    fn no_unsafe_character_survives_and_length_is_bounded() {
        let key = "flights/2026/07/20/\x1b[31mERROR\n2026-07-20T00:00:00Z ERROR forged\r\u{2028}\x7f\u{85}.json.gz";
        for out in [quote(key), escape(key), escape_bounded(key, 64)] {
            assert!(!out.chars().any(is_unsafe), "{out:?}");
        }
        assert_eq!(escape("a\nb"), "a\\nb");
        assert_eq!(escape("é/ü"), "é/ü", "other text stays readable");
        let big = "é".repeat(3_000_000);
        let q = quote(&big);
        assert!(q.len() < 2 * QUOTED_CHARS_MAX + 40, "{}", q.len());
        assert!(q.ends_with("…(6000000 bytes)"));
        let e = escape_bounded(&"\n".repeat(100_000), LOG_FIELD_BYTES_MAX);
        assert!(e.len() <= LOG_FIELD_BYTES_MAX + 24);
        assert!(e.ends_with("…(100000 bytes)"));
        assert_eq!(escape_bounded("plain", 3), "pla…(5 bytes)");
        assert_eq!(quote("short"), "\"short\"");
    }
}
