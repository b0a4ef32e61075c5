//! The human text of `status` and `audit`, laid out in one place (`prune-cache` prints one
//! line). Pure.

use std::fmt::{Display, Write as _};

/// Width of a field's label (`status`'s left column), before one space.
const LABEL_WIDTH: usize = 12;

/// A table column: its cells padded to a width, on the left or the right.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Col {
    /// Text, padded on the right.
    Left(usize),
    /// Figures, padded on the left.
    Right(usize),
}

/// Text built line by line.
#[derive(Debug, Default)]
pub(crate) struct Text(String);

impl Text {
    pub(crate) fn line(&mut self, line: impl Display) {
        let _ = writeln!(self.0, "{line}");
    }

    /// `label` in a [`LABEL_WIDTH`] column, then `value`.
    pub(crate) fn field(&mut self, label: &str, value: impl Display) {
        self.line(format_args!("{label:<LABEL_WIDTH$} {value}"));
    }

    /// Each of `items` on its own line after `indent`.
    pub(crate) fn items<I: Display>(&mut self, indent: &str, items: impl IntoIterator<Item = I>) {
        for item in items {
            self.line(format_args!("{indent}{item}"));
        }
    }

    /// A table row: each cell after two spaces, padded to its column, then `tail`.
    pub(crate) fn row(&mut self, cols: &[Col], cells: &[&dyn Display], tail: impl Display) {
        for (col, cell) in cols.iter().zip(cells) {
            let cell = cell.to_string();
            let _ = match *col {
                Col::Left(w) => write!(self.0, "  {cell:<w$}"),
                Col::Right(w) => write!(self.0, "  {cell:>w$}"),
            };
        }
        self.line(tail);
    }

    /// The first `max` of `items` (`total` in all), then `more` of how many are not shown.
    pub(crate) fn shortened<I: Display>(
        &mut self,
        indent: &str,
        items: &[I],
        max: usize,
        total: u64,
        more: impl Fn(u64) -> String,
    ) {
        let shown = items.len().min(max);
        self.items(indent, &items[..shown]);
        if total > shown as u64 {
            self.line(format_args!("{indent}{}", more(total - shown as u64)));
        }
    }

    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_rows_and_shortened_lists() {
        let mut t = Text::default();
        t.field("lease", "free");
        t.row(&[Col::Left(4), Col::Right(3)], &[&"date", &7], "");
        t.shortened("  ", &["a", "b", "c"], 2, 3, |n| format!("… {n} more"));
        assert_eq!(t.into_string(), "lease        free\n  date    7\n  a\n  b\n  … 1 more\n");
    }
}
