//! Extra columns: the one type each takes for the day, and the checked conversions into it. A
//! column the target does not know is kept exactly or its file is left in place. Its type is a join
//! ([`ExtraColumns`]) over every type the day's inputs hold in it, in any order:
//!
//! | types seen (all-null columns do not count) | the day's type |
//! |---|---|
//! | one type | that type |
//! | signed integers of several widths | the widest |
//! | unsigned integers of several widths | the widest |
//! | signed and unsigned integers | the signed type twice the widest unsigned (at most `int64`); `string` when an unsigned value exceeds `int64` |
//! | floats of several widths | the widest |
//! | integers and floats | `float64` when every integer is within ±2^53 (exact in a `float64`), else `string` |
//! | strings (any encoding: `large_utf8`, views, dictionaries) | `utf8` |
//! | binary (any encoding) | `binary` |
//! | strings with numbers, booleans or binary | `utf8`, each value rendered exactly (below); binary only when it is valid UTF-8 |
//! | booleans with numbers | `utf8` |
//! | anything else with a different type (structs, lists, timestamps, dates, decimals, ...) | refused: the input that brings it is left in place |
//!
//! Renderings into `utf8` are exact: integers in decimal; floats as the shortest decimal that reads
//! back as the same `float64` (Rust's `Display`), a `float32` from its exact `float64`; booleans
//! `true`/`false`. Each join step goes up one chain (integer → wider → `float64` → `utf8`; `binary`
//! → `utf8`) and renders as a direct rendering would, so values do not depend on merge order.
//! [`convert`] checks the values at hand, never a "safe" cast.

use super::*;

/// Largest magnitude below which a `float64` holds every integer exactly (2^53).
const F64_EXACT: u64 = 1 << 53;

/// What the day's inputs hold in one extra column so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Seen {
    /// The type declared where first seen (the day's type while every value is null).
    declared: Option<DataType>,
    /// Widest signed integer width seen (bits).
    signed: Option<u8>,
    /// Widest unsigned integer width seen (bits).
    unsigned: Option<u8>,
    /// Widest float width seen (bits).
    float: Option<u8>,
    boolean: bool,
    string: bool,
    binary: bool,
    /// Every other type seen, each once, in first-seen order.
    other: Vec<DataType>,
    /// Some integer's magnitude exceeds 2^53.
    int_beyond_f64: bool,
    /// Some unsigned value exceeds `i64::MAX`.
    uint_beyond_i64: bool,
    /// Some binary value is not valid UTF-8.
    binary_not_utf8: bool,
}

fn is_all_null(col: &ArrayRef) -> bool {
    col.data_type() == &DataType::Null || col.null_count() == col.len()
}

/// An integer type's signedness and width in bits (arrow's own helpers).
fn int_width(t: &DataType) -> Option<(bool, u8)> {
    t.primitive_width().filter(|_| t.is_integer()).map(|w| (t.is_signed_integer(), (w * 8) as u8))
}

/// A floating-point type's width in bits.
fn float_width(t: &DataType) -> Option<u8> {
    t.primitive_width().filter(|_| t.is_floating()).map(|w| (w * 8) as u8)
}

pub(super) fn is_string(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, v) => is_string(v),
        _ => false,
    }
}

fn is_binary(t: &DataType) -> bool {
    match t {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => true,
        DataType::Dictionary(_, v) => is_binary(v),
        _ => false,
    }
}

/// An integer column's non-null values (`None` for other types).
fn int_values(col: &ArrayRef) -> Option<Vec<i128>> {
    let (signed, _) = int_width(col.data_type())?;
    if signed {
        cast_values::<arrow_array::types::Int64Type>(col)
    } else {
        cast_values::<arrow_array::types::UInt64Type>(col)
    }
}

/// `col`'s non-null values cast to `T`, as `i128` (the cast to the widest integer of the same
/// sign never fails).
fn cast_values<T>(col: &ArrayRef) -> Option<Vec<i128>>
where
    T: arrow_array::ArrowPrimitiveType,
    T::Native: Into<i128>,
{
    let c = cast(col, &T::DATA_TYPE).ok()?;
    Some(c.as_primitive::<T>().iter().flatten().map(Into::into).collect())
}

impl Seen {
    fn add(&mut self, col: &ArrayRef) {
        let t = col.data_type();
        self.declared.get_or_insert_with(|| t.clone());
        if is_all_null(col) {
            return;
        }
        if let Some((signed, w)) = int_width(t) {
            let slot = if signed { &mut self.signed } else { &mut self.unsigned };
            *slot = Some(slot.unwrap_or(0).max(w));
            if let Some(values) = int_values(col) {
                self.int_beyond_f64 |= values.iter().any(|v| v.unsigned_abs() > F64_EXACT as u128);
                self.uint_beyond_i64 |= !signed && values.iter().any(|v| *v > i64::MAX as i128);
            }
        } else if let Some(w) = float_width(t) {
            self.float = Some(self.float.unwrap_or(0).max(w));
        } else if t == &DataType::Boolean {
            self.boolean = true;
        } else if is_string(t) {
            self.string = true;
        } else if is_binary(t) {
            self.binary = true;
            self.binary_not_utf8 |= convert(col, &DataType::Utf8).is_err();
        } else if !self.other.contains(t) {
            self.other.push(t.clone());
        }
    }

    /// The day's type, or why there is none.
    fn resolve(&self) -> Result<DataType, String> {
        let numeric = self.signed.is_some() || self.unsigned.is_some() || self.float.is_some();
        let named = [
            (numeric, "numbers"),
            (self.boolean, "booleans"),
            (self.string, "strings"),
            (self.binary, "binary"),
        ];
        let named = named.into_iter().filter(|(k, _)| *k).map(|(_, name)| name.to_string());
        let kinds = named.clone().count() + usize::from(!self.other.is_empty());
        if let Some(first) = self.other.first() {
            if self.other.len() > 1 || kinds > 1 {
                let seen: Vec<String> =
                    self.other.iter().map(|t| t.to_string()).chain(named).collect();
                return Err(format!(
                    "no type holds every value exactly: the day's inputs hold {} in it",
                    seen.join(", ")
                ));
            }
            return Ok(first.clone());
        }
        if kinds == 0 {
            return Ok(self.declared.clone().unwrap_or(DataType::Null));
        }
        if self.binary && self.binary_not_utf8 && kinds > 1 {
            return Err("binary values that are not UTF-8 beside other values: no type holds them all exactly".into());
        }
        if kinds > 1 || self.string {
            return Ok(DataType::Utf8);
        }
        if self.binary {
            return Ok(DataType::Binary);
        }
        if self.boolean {
            return Ok(DataType::Boolean);
        }
        // Widths are 8, 16, 32 or 64 bits; any other takes the 64-bit type.
        let int_type = |signed: bool, w: u8| {
            let types = if signed {
                [DataType::Int8, DataType::Int16, DataType::Int32, DataType::Int64]
            } else {
                [DataType::UInt8, DataType::UInt16, DataType::UInt32, DataType::UInt64]
            };
            let at = [8, 16, 32].iter().position(|&n| n == w).unwrap_or(3);
            types[at].clone()
        };
        Ok(match (self.signed, self.unsigned, self.float) {
            (None, None, Some(w)) => match w {
                16 => DataType::Float16,
                32 => DataType::Float32,
                _ => DataType::Float64,
            },
            (_, _, Some(_)) if self.int_beyond_f64 => DataType::Utf8,
            (_, _, Some(_)) => DataType::Float64,
            (Some(s), None, None) => int_type(true, s),
            (None, Some(u), None) => int_type(false, u),
            (Some(_), Some(_), None) if self.uint_beyond_i64 => DataType::Utf8,
            (Some(s), Some(u), None) => int_type(true, s.max(u.saturating_mul(2)).min(64)),
            (None, None, None) => unreachable!("kinds > 0"),
        })
    }
}

/// One extra column of the day.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Column {
    /// The name as first seen (in plan order).
    name: String,
    seen: Seen,
    /// The day's type for what was seen so far.
    data_type: DataType,
}

/// The day's extra columns: names (matched without case, spelled as first
/// seen) and the one type each takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraColumns {
    columns: Vec<Column>,
}

impl ExtraColumns {
    /// The day's columns after one more input; `self` is unchanged, so a
    /// refused input leaves no trace.
    ///
    /// Errors: [`Unmergeable`] naming the column when no type holds both exactly.
    pub fn with(&self, b: &RecordBatch) -> Result<ExtraColumns, Unmergeable> {
        let target_len = target_schema().fields().len();
        let mut next = self.clone();
        for (f, col) in (b.schema().fields().iter().zip(b.columns())).skip(target_len) {
            next.add(f.name(), col)?;
        }
        Ok(next)
    }

    /// Adds one column's values; on an error `self` may be part-changed.
    pub(super) fn add(&mut self, name: &str, col: &ArrayRef) -> Result<(), Unmergeable> {
        let ix = match (self.columns.iter()).position(|c| super::same_column(&c.name, name)) {
            Some(ix) => ix,
            None => {
                self.columns.push(Column {
                    name: name.to_string(),
                    seen: Seen::default(),
                    data_type: DataType::Null,
                });
                self.columns.len() - 1
            }
        };
        let c = &mut self.columns[ix];
        c.seen.add(col);
        c.data_type = c.seen.resolve().map_err(|e| {
            let t = col.data_type();
            let reason = format!(
                "extra column {name}: {e}; the file is left in place (its {t} does not join the type the column has for the day)"
            );
            Unmergeable::new(Some(name), reason)
        })?;
        Ok(())
    }

    /// The day's type of column `i` (in first-seen order).
    pub(super) fn data_type(&self, i: usize) -> &DataType {
        &self.columns[i].data_type
    }

    /// Names of the extra columns, in first-seen order.
    pub fn names(&self) -> Vec<String> {
        self.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// Whether `other` changes the output schema (a column's type, or new columns).
    pub(crate) fn schema_differs(&self, other: &ExtraColumns) -> bool {
        self.columns.len() != other.columns.len()
            || self.columns.iter().zip(&other.columns).any(|(a, b)| a.data_type != b.data_type)
    }

    /// The output schema: [`target_schema`], then the extra columns (nullable) in the day's types.
    pub fn schema(&self) -> SchemaRef {
        if self.columns.is_empty() {
            return target_schema();
        }
        let mut fields: Vec<Field> =
            target_schema().fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(self.columns.iter().map(|c| Field::new(&c.name, c.data_type.clone(), true)));
        Arc::new(Schema::new(fields))
    }
}

/// Converts `col` to `to` when every value stays exact; an all-null column converts to any type.
///
/// Errors: why a value does not fit, e.g. "2.75 has no exact int64 value".
pub fn convert(col: &ArrayRef, to: &DataType) -> Result<ArrayRef, String> {
    let from = col.data_type();
    if from == to {
        return Ok(col.clone());
    }
    if is_all_null(col) {
        return Ok(new_null_array(to, col.len()));
    }
    let strict = arrow_cast::CastOptions { safe: false, ..Default::default() };
    let checked = |to: &DataType| -> Result<ArrayRef, String> {
        let out = arrow_cast::cast_with_options(col, to, &strict).map_err(|e| e.to_string())?;
        if out.null_count() != col.null_count() {
            return Err(format!("{from} to {to} would null a value"));
        }
        Ok(out)
    };
    match to {
        // Arrow renders integers in decimal and booleans as `true`/`false`.
        DataType::Utf8 if is_string(from) || int_width(from).is_some() => checked(to),
        DataType::Utf8 if from == &DataType::Boolean => checked(to),
        DataType::Utf8 if is_binary(from) => {
            checked(to).map_err(|_| "a binary value is not UTF-8".to_string())
        }
        DataType::Utf8 if float_width(from).is_some() => {
            // Not arrow's rendering (`1e20`): `Display`'s, from the exact `float64`.
            let c = checked(&DataType::Float64)?;
            let values = c.as_primitive::<arrow_array::types::Float64Type>().iter();
            Ok(Arc::new(values.map(|v| v.map(|v| v.to_string())).collect::<StringArray>()))
        }
        DataType::Binary if is_binary(from) => checked(to),
        DataType::Float64 if float_width(from).is_some() => checked(to),
        DataType::Float32 if float_width(from).is_some_and(|w| w <= 32) => checked(to),
        DataType::Float64 if int_width(from).is_some() => {
            let values = int_values(col).ok_or("not an integer column")?;
            if let Some(v) = values.iter().find(|v| v.unsigned_abs() > F64_EXACT as u128) {
                return Err(format!("{v} has no exact float64 value"));
            }
            checked(to)
        }
        t if int_width(t).is_some() && int_width(from).is_some() => {
            // Strict casts fail on a value that does not fit.
            arrow_cast::cast_with_options(col, to, &strict).map_err(|_| {
                let values = int_values(col).unwrap_or_default();
                let (signed, w) = int_width(t).expect("an integer");
                let fits = if signed { -(1i128 << (w - 1))..1 << (w - 1) } else { 0..1 << w };
                match values.iter().find(|v| !fits.contains(v)) {
                    Some(v) => format!("{v} does not fit {t}"),
                    None => format!("{from} does not convert to {t}"),
                }
            })
        }
        t if int_width(t).is_some() && float_width(from).is_some() => {
            // Never narrowed: the join widens integers beside floats.
            let c = checked(&DataType::Float64)?;
            let fraction = (c.as_primitive::<arrow_array::types::Float64Type>().iter())
                .flatten()
                .find(|v| v.fract() != 0.0 || !v.is_finite());
            Err(match fraction {
                Some(v) => format!("{v} has no exact {t} value"),
                None => format!("{from} is never narrowed to {t}"),
            })
        }
        _ => Err(format!("{from} cannot be converted to {to} without loss")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{row, with_column};
    use super::super::{MergeInput, Merger, Source, conform};
    use super::*;
    use arrow_array::{
        BinaryArray, BooleanArray, DictionaryArray, Float32Array, Float64Array, Int8Array,
        Int32Array, Int64Array, LargeStringArray, ListArray, NullArray, StructArray, UInt8Array,
        UInt32Array, UInt64Array, types::Int32Type,
    };
    use chrono::DateTime;

    fn a(x: impl Array + 'static) -> ArrayRef {
        Arc::new(x)
    }

    /// Integer widths are 8-64 bits where they are measured; any other takes the 64-bit type
    /// rather than panicking on the type table's index.
    #[test]
    fn an_integer_width_outside_the_table_takes_the_64_bit_type() {
        for w in [0, 1, 128, 255] {
            let signed = Seen { signed: Some(w), ..Seen::default() };
            assert_eq!(signed.resolve(), Ok(DataType::Int64), "signed width {w}");
            let unsigned = Seen { unsigned: Some(w), ..Seen::default() };
            assert_eq!(unsigned.resolve(), Ok(DataType::UInt64), "unsigned width {w}");
        }
        let narrow = Seen { signed: Some(16), ..Seen::default() };
        assert_eq!(narrow.resolve(), Ok(DataType::Int16));
    }
    fn strings(v: &[Option<&str>]) -> ArrayRef {
        a(StringArray::from(v.to_vec()))
    }
    fn a_struct(v: Option<i32>) -> ArrayRef {
        let inner: ArrayRef = a(Int32Array::from(vec![v]));
        let nulls = v.is_none().then(|| vec![false].into());
        a(StructArray::new(
            vec![Field::new("lat", DataType::Int32, true)].into(),
            vec![inner],
            nulls,
        ))
    }
    fn a_list(v: Option<i32>) -> ArrayRef {
        a(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![v.map(|x| vec![Some(x)])]))
    }

    /// Every conversion the merge may ask for, with values that make a
    /// cast lossy: accepted ones give exactly these values, refused ones
    /// say why.
    #[test]
    fn conversion_table() {
        let big = 1i64 << 40;
        let ok: Vec<(ArrayRef, DataType, ArrayRef)> = vec![
            (a(Int32Array::from(vec![7])), DataType::Int64, a(Int64Array::from(vec![7]))),
            (a(Int8Array::from(vec![-3])), DataType::Int32, a(Int32Array::from(vec![-3]))),
            (
                a(UInt32Array::from(vec![u32::MAX])),
                DataType::Int64,
                a(Int64Array::from(vec![u32::MAX as i64])),
            ),
            (
                a(Int64Array::from(vec![1 << 53, -(1 << 53)])),
                DataType::Float64,
                a(Float64Array::from(vec![9007199254740992.0, -9007199254740992.0])),
            ),
            (
                a(Float32Array::from(vec![2.1f32])),
                DataType::Float64,
                a(Float64Array::from(vec![2.1f32 as f64])),
            ),
            (
                a(Int64Array::from(vec![Some(1), None, Some(-5), Some(big)])),
                DataType::Utf8,
                strings(&[Some("1"), None, Some("-5"), Some("1099511627776")]),
            ),
            (
                a(UInt64Array::from(vec![u64::MAX])),
                DataType::Utf8,
                strings(&[Some("18446744073709551615")]),
            ),
            (
                a(Float64Array::from(vec![2.75, 3.0, 1e20, -0.1, f64::NAN, f64::INFINITY])),
                DataType::Utf8,
                strings(&[
                    Some("2.75"),
                    Some("3"),
                    Some("100000000000000000000"),
                    Some("-0.1"),
                    Some("NaN"),
                    Some("inf"),
                ]),
            ),
            (
                a(Float32Array::from(vec![2.1f32])),
                DataType::Utf8,
                strings(&[Some("2.0999999046325684")]),
            ),
            (
                a(BooleanArray::from(vec![Some(true), None, Some(false)])),
                DataType::Utf8,
                strings(&[Some("true"), None, Some("false")]),
            ),
            (
                a(BinaryArray::from(vec![Some(b"adsb".as_ref()), None])),
                DataType::Utf8,
                strings(&[Some("adsb"), None]),
            ),
            (a(LargeStringArray::from(vec!["x"])), DataType::Utf8, strings(&[Some("x")])),
            (
                a(vec!["a", "b", "a"].into_iter().collect::<DictionaryArray<Int32Type>>()),
                DataType::Utf8,
                strings(&[Some("a"), Some("b"), Some("a")]),
            ),
            // All nulls convert to anything (fastparquet's all-None plain
            // binary, pyarrow's null type, a null struct into a list).
            (
                a(BinaryArray::from(vec![None::<&[u8]>, None])),
                DataType::Int64,
                a(Int64Array::from(vec![None, None])),
            ),
            (a(NullArray::new(1)), DataType::Utf8, strings(&[None])),
            (
                a_struct(None),
                a_list(Some(1)).data_type().clone(),
                new_null_array(a_list(Some(1)).data_type(), 1),
            ),
        ];
        for (from, to, want) in ok {
            let got =
                convert(&from, &to).unwrap_or_else(|e| panic!("{} -> {to}: {e}", from.data_type()));
            assert_eq!(got.data_type(), &to);
            assert_eq!(got.to_data(), want.to_data(), "{} -> {to}", from.data_type());
        }
        let refused: Vec<(ArrayRef, DataType, &str)> = vec![
            (a(Int64Array::from(vec![big])), DataType::Int32, "1099511627776 does not fit"),
            (a(UInt64Array::from(vec![u64::MAX])), DataType::Int64, "does not fit"),
            (a(Int8Array::from(vec![-1])), DataType::UInt8, "-1 does not fit"),
            (a(Int64Array::from(vec![(1 << 53) + 1])), DataType::Float64, "no exact float64"),
            (a(Int64Array::from(vec![i64::MAX])), DataType::Float64, "no exact float64"),
            (a(Float64Array::from(vec![2.75])), DataType::Int64, "2.75 has no exact"),
            (a(Float64Array::from(vec![2.0])), DataType::Int64, "never narrowed"),
            (a(Float64Array::from(vec![2.1])), DataType::Float32, "without loss"),
            (strings(&[Some("adsb-exchange")]), DataType::Int64, "without loss"),
            (strings(&[Some("7")]), DataType::Int64, "without loss"),
            (strings(&[Some("true")]), DataType::Boolean, "without loss"),
            (a(BinaryArray::from(vec![&[0xff_u8][..]])), DataType::Utf8, "not UTF-8"),
            (a(Int64Array::from(vec![1])), DataType::Boolean, "without loss"),
            (a_struct(Some(1)), a_list(Some(1)).data_type().clone(), "without loss"),
            (a_list(Some(1)), a_struct(Some(1)).data_type().clone(), "without loss"),
            (
                a(arrow_array::TimestampMillisecondArray::from(vec![1])),
                DataType::Int64,
                "without loss",
            ),
        ];
        for (from, to, why) in refused {
            let e = convert(&from, &to)
                .expect_err(&format!("{} -> {to} must be refused", from.data_type()));
            assert!(e.contains(why), "{} -> {to}: {e}", from.data_type());
        }
    }

    fn day_type(cols: &[ArrayRef]) -> Result<DataType, String> {
        let mut seen = Seen::default();
        for c in cols {
            seen.add(c);
        }
        seen.resolve()
    }

    /// The join: what the day's type is for what its inputs hold, the same
    /// in every order.
    #[test]
    fn join_table() {
        let cases: Vec<(Vec<ArrayRef>, Result<DataType, &str>)> = vec![
            (
                vec![a(Int32Array::from(vec![7])), a(Int64Array::from(vec![1 << 40]))],
                Ok(DataType::Int64),
            ),
            (
                vec![
                    a(Int64Array::from(vec![1])),
                    strings(&[Some("adsb-exchange")]),
                    a(Float64Array::from(vec![2.75])),
                ],
                Ok(DataType::Utf8),
            ),
            (
                vec![a(Int64Array::from(vec![3])), a(Float64Array::from(vec![2.75]))],
                Ok(DataType::Float64),
            ),
            (
                vec![a(Int64Array::from(vec![1 << 60])), a(Float64Array::from(vec![2.5]))],
                Ok(DataType::Utf8),
            ),
            (
                vec![a(UInt8Array::from(vec![200])), a(Int8Array::from(vec![-1]))],
                Ok(DataType::Int16),
            ),
            (
                vec![a(UInt32Array::from(vec![1])), a(Int64Array::from(vec![1]))],
                Ok(DataType::Int64),
            ),
            (
                vec![a(UInt64Array::from(vec![u64::MAX])), a(Int8Array::from(vec![-1]))],
                Ok(DataType::Utf8),
            ),
            (
                vec![a(UInt64Array::from(vec![1])), a(Int8Array::from(vec![-1]))],
                Ok(DataType::Int64),
            ),
            (
                vec![a(Float32Array::from(vec![1.5f32])), a(Float64Array::from(vec![2.5]))],
                Ok(DataType::Float64),
            ),
            (vec![a(Float32Array::from(vec![1.5f32]))], Ok(DataType::Float32)),
            (
                vec![a(BooleanArray::from(vec![true])), a(Int32Array::from(vec![1]))],
                Ok(DataType::Utf8),
            ),
            (
                vec![a(BinaryArray::from(vec![b"a".as_ref()])), strings(&[Some("b")])],
                Ok(DataType::Utf8),
            ),
            (vec![a(BinaryArray::from(vec![&[0xff_u8][..]]))], Ok(DataType::Binary)),
            (
                vec![a(BinaryArray::from(vec![&[0xff_u8][..]])), strings(&[Some("b")])],
                Err("not UTF-8"),
            ),
            (vec![strings(&[None]), a(Int64Array::from(vec![5]))], Ok(DataType::Int64)),
            (
                vec![a(BinaryArray::from(vec![None::<&[u8]>])), a(Int64Array::from(vec![5]))],
                Ok(DataType::Int64),
            ),
            (vec![a_struct(Some(1)), a_list(Some(1))], Err("no type holds every value")),
            (vec![a_struct(None), a_list(Some(1))], Ok(a_list(Some(1)).data_type().clone())),
            (
                vec![
                    a(arrow_array::TimestampMillisecondArray::from(vec![1])),
                    a(Int64Array::from(vec![1])),
                ],
                Err("no type holds"),
            ),
            (
                vec![
                    a(arrow_array::TimestampMillisecondArray::from(vec![1])),
                    strings(&[Some("x")]),
                ],
                Err("no type holds"),
            ),
        ];
        for (cols, want) in cases {
            let mut order: Vec<usize> = (0..cols.len()).collect();
            // Every rotation and its reverse: the same verdict.
            for r in 0..cols.len() * 2 {
                order.rotate_left(1);
                if r == cols.len() {
                    order.reverse();
                }
                let these: Vec<ArrayRef> = order.iter().map(|&i| cols[i].clone()).collect();
                let kinds: Vec<String> = these.iter().map(|c| c.data_type().to_string()).collect();
                match (day_type(&these), &want) {
                    (Ok(t), Ok(w)) => {
                        assert_eq!(&t, w, "{kinds:?}");
                        for c in &these {
                            convert(c, &t).unwrap_or_else(|e| panic!("{kinds:?}: {e}"));
                        }
                    }
                    (Err(e), Err(w)) => assert!(e.contains(w), "{kinds:?}: {e}"),
                    (got, _) => panic!("{kinds:?}: {got:?}, want {want:?}"),
                }
            }
        }
    }

    fn u(i: u32) -> String {
        super::super::tests::uuid_n(i)
    }

    /// Flight `i`'s row with an extra column `name` holding `col`.
    fn with(i: u32, name: &str, col: ArrayRef) -> MergeInput {
        let b = with_column(row(&u(i), "X"), name, col);
        MergeInput {
            source: Source::PerFlight(Uuid::parse_str(&u(i)).unwrap()),
            last_modified: DateTime::from_timestamp(1, 0).unwrap(),
            decoded: conform(&b).unwrap(),
        }
    }

    fn merged(inputs: Vec<MergeInput>) -> (RecordBatch, Vec<String>) {
        let mut m = Merger::new();
        let mut refused = Vec::new();
        for i in inputs {
            match m.push(i) {
                Ok(()) => {}
                Err(MergeError::Input(u)) => refused.push(u.reason),
                Err(e) => panic!("{e}"),
            }
        }
        let rows = m.finish().unwrap();
        let parts: Vec<RecordBatch> = rows.batches(1000).collect::<Result<_, _>>().unwrap();
        (arrow_select::concat::concat_batches(&rows.schema(), &parts).unwrap(), refused)
    }

    /// The first case: `source` as int64, string and float in three
    /// files is one utf8 column holding every value as written, in every
    /// order the inputs may come in; the values never depend on the order.
    #[test]
    fn mixed_extra_column_is_kept_exactly_in_any_order() {
        let cols: Vec<ArrayRef> = vec![
            a(Int64Array::from(vec![1])),
            strings(&[Some("adsb-exchange")]),
            a(Float64Array::from(vec![2.75])),
            a(Int32Array::from(vec![7])),
            a(Float32Array::from(vec![0.5f32])),
            a(BooleanArray::from(vec![true])),
            a(Int64Array::from(vec![1 << 40])),
        ];
        let want = ["1", "adsb-exchange", "2.75", "7", "0.5", "true", "1099511627776"];
        let mut order: Vec<usize> = (0..cols.len()).collect();
        for r in 0..cols.len() * 2 {
            order.rotate_left(1);
            if r == cols.len() {
                order.reverse();
            }
            let inputs = order.iter().map(|&i| with(i as u32, "source", cols[i].clone())).collect();
            let (b, refused) = merged(inputs);
            assert!(refused.is_empty(), "{refused:?}");
            let got = b.column(9).as_string::<i32>();
            let got: Vec<&str> = (0..got.len()).map(|i| got.value(i)).collect();
            assert_eq!(got, want, "order {order:?}");
        }
        // int32 7 then int64 2^40: int64, both exact.
        let (b, _) = merged(vec![
            with(0, "n", a(Int32Array::from(vec![7]))),
            with(1, "n", a(Int64Array::from(vec![1 << 40]))),
        ]);
        assert_eq!(b.column(9).to_data(), Int64Array::from(vec![7, 1 << 40]).to_data());
        // int64 3, then 2.75: float64; then text: every value as its own text.
        let (b, _) = merged(vec![
            with(0, "n", a(Int64Array::from(vec![3]))),
            with(1, "n", a(Float64Array::from(vec![2.75]))),
        ]);
        assert_eq!(b.column(9).to_data(), Float64Array::from(vec![3.0, 2.75]).to_data());
    }

    /// A struct in one file and a list in another: the later one (in plan
    /// order) is refused as a whole and nothing of it is merged; the day
    /// goes on.
    #[test]
    fn an_extra_column_that_joins_nothing_refuses_that_input_only() {
        let (b, refused) = merged(vec![
            with(0, "pos", a_struct(Some(1))),
            with(1, "pos", a_list(Some(2))),
            with(2, "pos", a_struct(Some(3))),
            with(3, "pos", a_list(None)),
        ]);
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].contains("extra column pos"), "{}", refused[0]);
        assert_eq!(b.num_rows(), 3, "flights 0, 2 and 3 (a null list joins the struct)");
        let keys = b.column(8).as_string::<i32>();
        assert!(keys.value(1).contains(&u(2)));
        assert_eq!(b.column(9).data_type(), a_struct(None).data_type());
    }

    /// A column of nulls alone keeps the type it was declared with (the
    /// null type too), and the output encodes and reads back.
    #[test]
    fn an_all_null_extra_column_alone_keeps_its_declared_type_and_encodes() {
        for col in [a(NullArray::new(1)), a(BinaryArray::from(vec![None::<&[u8]>]))] {
            let t = col.data_type().clone();
            let (b, _) =
                merged(vec![with(0, "note", col), with(1, "other", a(Int32Array::from(vec![1])))]);
            assert_eq!(b.column(9).data_type(), &t);
            let bytes = super::super::encode(std::slice::from_ref(&b), 10).unwrap();
            let back = super::super::decode(bytes::Bytes::from(bytes)).unwrap();
            assert_eq!(back.batch.num_rows(), 2);
            assert_eq!(back.batch.column(9).logical_null_count(), 2, "{t}");
        }
    }

    /// Names match without case across files: `Source` and `source` are
    /// one column, spelled as first seen.
    #[test]
    fn extra_columns_match_without_case_across_files() {
        let (b, _) = merged(vec![
            with(0, "Source", strings(&[Some("a")])),
            with(1, "source", strings(&[Some("b")])),
        ]);
        assert_eq!(b.num_columns(), 10);
        assert_eq!(b.schema().field(9).name(), "Source");
        assert_eq!(b.column(9).to_data(), StringArray::from(vec!["a", "b"]).to_data());
    }
}
