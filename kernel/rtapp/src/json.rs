//! A small JSON reader that keeps source positions and object key order.
//!
//! rt-app workloads depend on the order of keys inside a phase (events run in file
//! order) and tolerate repeated keys (`"run": 10, "sleep": 5, "run": 10`), and every
//! error we report must name the line and column it comes from. Generic JSON crates give
//! up one or the other (see `docs/dependencies.md`), so the workload reader uses this.
//! Objects are an ordered list of [`Member`]s; every value carries its position.
//!
//! Also accepted, because rt-app's own example files use them: `//` and `/* */` comments.
//!
//! Numbers never become floats: an integer is an `i64` ([`Value::Int`]), any number with
//! a fraction or an exponent a fixed-point [`Micro`] (millionths), converted exactly at
//! parse time. A number that does not fit, or has more than six decimal places, is an
//! error at its position, never a silent rounding.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// A decimal number in millionths (`1.5` is `Micro(1_500_000)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Micro(pub i64);

/// A parsed JSON value with the position of its first character.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spanned {
    /// 1-based line of the value's first character.
    pub line: u32,
    /// 1-based column (in characters) of the value's first character.
    pub col: u32,
    /// The value itself.
    pub value: Value,
}

/// One `"key": value` of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The key, unescaped.
    pub key: String,
    /// 1-based line of the key.
    pub line: u32,
    /// 1-based column of the key's opening quote.
    pub col: u32,
    /// The value.
    pub value: Spanned,
}

/// A JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number written without fraction or exponent (it fits an `i64`).
    Int(i64),
    /// A number written with a fraction or an exponent.
    Decimal(Micro),
    /// A string, unescaped.
    Str(String),
    /// An array.
    Array(Vec<Spanned>),
    /// An object: keys in file order, repeats kept.
    Object(Vec<Member>),
}

impl Value {
    /// The JSON type name, for "expected X, found Y" messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Decimal(_) => "a number",
            Value::Str(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// A syntax error with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
    /// Dotted path of the value being parsed when the error was found (`tasks.a[2]`).
    pub path: String,
    /// What went wrong.
    pub msg: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: {}", self.line, self.col, self.msg)
    }
}

/// Nesting limit: a hostile file cannot overflow the (kernel's small) stack. rt-app files
/// nest six levels deep (`tasks.t.phases.p.timer.period`).
pub const MAX_DEPTH: u32 = 32;

/// Parse a whole document. Trailing non-whitespace is an error.
pub fn parse(text: &str) -> Result<Spanned, SyntaxError> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        line: 1,
        col: 1,
        depth: 0,
        path: Vec::new(),
    };
    p.skip_ws()?;
    let v = p.value()?;
    p.skip_ws()?;
    if p.pos < p.s.len() {
        return Err(p.err("unexpected text after the end of the JSON document"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    line: u32,
    col: u32,
    depth: u32,
    path: Vec<String>,
}

impl Parser<'_> {
    fn err(&self, msg: impl Into<String>) -> SyntaxError {
        self.err_at(self.line, self.col, msg)
    }

    fn err_at(&self, line: u32, col: u32, msg: impl Into<String>) -> SyntaxError {
        let mut path = String::new();
        for seg in &self.path {
            if !seg.starts_with('[') && !path.is_empty() {
                path.push('.');
            }
            path.push_str(seg);
        }
        SyntaxError {
            line,
            col,
            path,
            msg: msg.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn bump(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.pos += 1;
        if c == b'\n' {
            self.line = self.line.saturating_add(1);
            self.col = 1;
        } else if c & 0xc0 != 0x80 {
            // Count characters, not UTF-8 continuation bytes.
            self.col = self.col.saturating_add(1);
        }
        Some(c)
    }

    /// Whitespace, plus `//` and `/* */` comments, which rt-app's own files use.
    fn skip_ws(&mut self) -> Result<(), SyntaxError> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => {
                    self.bump();
                }
                Some(b'/') if self.s.get(self.pos + 1) == Some(&b'/') => {
                    while let Some(c) = self.peek() {
                        if c == b'\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                Some(b'/') if self.s.get(self.pos + 1) == Some(&b'*') => {
                    let start = self.err("unterminated /* comment");
                    self.bump();
                    self.bump();
                    loop {
                        match self.bump() {
                            None => return Err(start),
                            Some(b'*') if self.peek() == Some(b'/') => {
                                self.bump();
                                break;
                            }
                            Some(_) => {}
                        }
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn expect_lit(&mut self, lit: &str, v: Value) -> Result<Value, SyntaxError> {
        if self.s[self.pos..].starts_with(lit.as_bytes()) {
            for _ in 0..lit.len() {
                self.bump();
            }
            Ok(v)
        } else {
            Err(self.err("expected a JSON value"))
        }
    }

    fn value(&mut self) -> Result<Spanned, SyntaxError> {
        let (line, col) = (self.line, self.col);
        let value = match self.peek() {
            None => return Err(self.err("unexpected end of input, expected a value")),
            Some(b'{') => self.object()?,
            Some(b'[') => self.array()?,
            Some(b'"') => Value::Str(self.string()?),
            Some(b't') => self.expect_lit("true", Value::Bool(true))?,
            Some(b'f') => self.expect_lit("false", Value::Bool(false))?,
            Some(b'n') => self.expect_lit("null", Value::Null)?,
            Some(b'-' | b'0'..=b'9') => self.number()?,
            Some(c) if c.is_ascii_graphic() => {
                return Err(self.err(format!("unexpected character '{}'", c as char)))
            }
            Some(c) => return Err(self.err(format!("unexpected byte 0x{c:02x}"))),
        };
        Ok(Spanned { line, col, value })
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Value, SyntaxError> {
        self.enter()?;
        self.bump();
        let mut members = Vec::new();
        self.skip_ws()?;
        if self.peek() == Some(b'}') {
            self.bump();
            self.depth -= 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_ws()?;
            if self.peek() != Some(b'"') {
                return Err(self.err("expected a quoted object key"));
            }
            let (line, col) = (self.line, self.col);
            let key = self.string()?;
            self.skip_ws()?;
            if self.peek() != Some(b':') {
                return Err(self.err(format!("expected ':' after key \"{key}\"")));
            }
            self.bump();
            self.skip_ws()?;
            self.path.push(key.clone());
            let value = self.value()?;
            self.path.pop();
            members.push(Member {
                key,
                line,
                col,
                value,
            });
            self.skip_ws()?;
            match self.peek() {
                Some(b',') => self.bump(),
                Some(b'}') => {
                    self.bump();
                    break;
                }
                _ => return Err(self.err("expected ',' or '}' in object")),
            };
        }
        self.depth -= 1;
        Ok(Value::Object(members))
    }

    fn array(&mut self) -> Result<Value, SyntaxError> {
        self.enter()?;
        self.bump();
        let mut items = Vec::new();
        self.skip_ws()?;
        if self.peek() == Some(b']') {
            self.bump();
            self.depth -= 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_ws()?;
            self.path.push(format!("[{}]", items.len()));
            let v = self.value()?;
            self.path.pop();
            items.push(v);
            self.skip_ws()?;
            match self.peek() {
                Some(b',') => self.bump(),
                Some(b']') => {
                    self.bump();
                    break;
                }
                _ => return Err(self.err("expected ',' or ']' in array")),
            };
        }
        self.depth -= 1;
        Ok(Value::Array(items))
    }

    fn string(&mut self) -> Result<String, SyntaxError> {
        let start = self.err("unterminated string");
        self.bump();
        let mut out = Vec::new();
        loop {
            match self.bump() {
                None => return Err(start),
                Some(b'"') => break,
                Some(b'\\') => {
                    let c = self.bump().ok_or_else(|| start.clone())?;
                    match c {
                        b'"' => out.push(b'"'),
                        b'\\' => out.push(b'\\'),
                        b'/' => out.push(b'/'),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let mut cp = 0u32;
                            for _ in 0..4 {
                                let d = self.bump().and_then(|d| (d as char).to_digit(16));
                                cp = cp * 16 + d.ok_or_else(|| self.err("bad \\u escape"))?;
                            }
                            let ch = char::from_u32(cp).unwrap_or('\u{fffd}');
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.err("unknown escape in string")),
                    }
                }
                Some(c) if c < 0x20 => return Err(self.err("control character in string")),
                Some(c) => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("string is not valid UTF-8"))
    }

    /// A number in JSON's grammar (RFC 8259 §6), read exactly: `-? int frac? exp?`.
    fn number(&mut self) -> Result<Value, SyntaxError> {
        let (line, col) = (self.line, self.col);
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.bump();
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => {
                self.bump();
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("expected a digit in number")),
        }
        let int_digits = &self.s[int_start..self.pos];
        let mut frac_digits: &[u8] = &[];
        if self.peek() == Some(b'.') {
            self.bump();
            let f = self.pos;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("expected a digit after '.' in number"));
            }
            self.digits();
            frac_digits = &self.s[f..self.pos];
        }
        let mut exp: i64 = 0;
        let mut has_exp = false;
        if matches!(self.peek(), Some(b'e' | b'E')) {
            has_exp = true;
            self.bump();
            let neg_exp = match self.peek() {
                Some(b'-') => {
                    self.bump();
                    true
                }
                Some(b'+') => {
                    self.bump();
                    false
                }
                _ => false,
            };
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.err("expected a digit in the number's exponent"));
            }
            while let Some(d @ b'0'..=b'9') = self.peek() {
                // Saturate: any exponent past a thousand is out of range anyway.
                exp = (exp * 10 + i64::from(d - b'0')).min(100_000);
                self.bump();
            }
            if neg_exp {
                exp = -exp;
            }
        }
        if matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
        ) {
            return Err(self.err_at(line, col, "malformed number"));
        }
        let text = core::str::from_utf8(&self.s[start..self.pos]).unwrap_or("?");
        if frac_digits.is_empty() && !has_exp {
            return int_value(int_digits, negative)
                .map(Value::Int)
                .ok_or_else(|| {
                    self.err_at(
                        line,
                        col,
                        format!("integer {text} is out of range (a 64-bit signed integer)"),
                    )
                });
        }
        decimal_value(int_digits, frac_digits, exp, negative)
            .map(Value::Decimal)
            .map_err(|e| self.err_at(line, col, format!("number {text} {e}")))
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.bump();
        }
    }
}

fn int_value(digits: &[u8], negative: bool) -> Option<i64> {
    let mut v: i64 = 0;
    for &d in digits {
        let d = i64::from(d - b'0');
        v = v.checked_mul(10)?;
        v = if negative {
            v.checked_sub(d)?
        } else {
            v.checked_add(d)?
        };
    }
    Some(v)
}

/// `±int.frac × 10^exp` in millionths, exactly.
fn decimal_value(
    int_digits: &[u8],
    frac_digits: &[u8],
    exp: i64,
    negative: bool,
) -> Result<Micro, &'static str> {
    const RANGE: &str = "is out of range (at most ±9223372036854.775807)";
    // value = mantissa × 10^(exp - frac_digits.len()); in millionths, × 10^6 more.
    let mut mantissa: i128 = 0;
    let mut scale: i64 = exp.saturating_sub(frac_digits.len() as i64) + 6;
    let mut all = int_digits.iter().chain(frac_digits.iter()).copied();
    for d in all.by_ref() {
        mantissa = mantissa * 10 + i128::from(d - b'0');
        if mantissa > i128::from(i64::MAX) * 10 {
            // Far out of range unless what follows is cancelled by a negative scale:
            // count the remaining digits into the scale and require them to be zero.
            break;
        }
    }
    for d in all {
        if d != b'0' {
            return Err(if scale < 0 {
                "has more than 6 decimal places"
            } else {
                RANGE
            });
        }
        scale += 1;
    }
    if mantissa == 0 {
        return Ok(Micro(0));
    }
    while scale < 0 {
        if mantissa % 10 != 0 {
            return Err("has more than 6 decimal places");
        }
        mantissa /= 10;
        scale += 1;
    }
    while scale > 0 {
        mantissa = mantissa.checked_mul(10).ok_or(RANGE)?;
        if mantissa > i128::from(i64::MAX) + 1 {
            return Err(RANGE);
        }
        scale -= 1;
    }
    let signed = if negative { -mantissa } else { mantissa };
    i64::try_from(signed).map(Micro).map_err(|_| RANGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn members(v: Spanned) -> Vec<Member> {
        match v.value {
            Value::Object(m) => m,
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn keeps_order_duplicates_and_positions() {
        let m = members(parse("{\n \"run\": 10,\n \"sleep\": 5,\n   \"run\": -3 }").unwrap());
        let keys: Vec<_> = m.iter().map(|m| (m.key.as_str(), m.line, m.col)).collect();
        assert_eq!(keys, [("run", 2, 2), ("sleep", 3, 2), ("run", 4, 4)]);
        assert_eq!(m[2].value.value, Value::Int(-3));
        assert_eq!((m[2].value.line, m[2].value.col), (4, 11));
    }

    #[test]
    fn reports_position_of_syntax_errors() {
        let e = parse("{\n  \"a\": 1,\n  \"b\" 2\n}").unwrap_err();
        assert_eq!((e.line, e.col), (3, 7));
        assert!(e.msg.contains("':'"), "{e}");
        let e = parse("[1, 2").unwrap_err();
        assert_eq!(e.line, 1);
        let e = parse("{\"a\": {\"b\": [1, tru]}}").unwrap_err();
        assert_eq!(e.path, "a.b[1]");
    }

    #[test]
    fn numbers_strings_comments() {
        let v =
            parse("/* c */ [1.5, \"a\\n\\u0041\", true, null, -0, 2e3, 0.000001] // end").unwrap();
        let Value::Array(a) = v.value else { panic!() };
        assert_eq!(a[0].value, Value::Decimal(Micro(1_500_000)));
        assert_eq!(a[1].value, Value::Str("a\nA".into()));
        assert_eq!(a[4].value, Value::Int(0));
        assert_eq!(a[5].value, Value::Decimal(Micro(2_000_000_000)));
        assert_eq!(a[6].value, Value::Decimal(Micro(1)));
    }

    #[test]
    fn decimals_are_exact_in_millionths() {
        let d = |s: &str| match parse(s).map(|v| v.value) {
            Ok(Value::Decimal(m)) => Ok(m.0),
            Ok(other) => panic!("{s}: {other:?}"),
            Err(e) => Err(e.msg),
        };
        // Oracle: the decimal expansion by hand.
        assert_eq!(d("-12.25"), Ok(-12_250_000));
        assert_eq!(d("1.2345600000"), Ok(1_234_560));
        assert_eq!(d("123456e-6"), Ok(123_456));
        assert_eq!(d("0.5E+1"), Ok(5_000_000));
        assert_eq!(d("9223372036854.775807"), Ok(i64::MAX));
        assert_eq!(d("-9223372036854.775808"), Ok(i64::MIN));
        assert_eq!(d("0e99999999999999999"), Ok(0));
        assert!(d("9223372036854.775808")
            .unwrap_err()
            .contains("out of range"));
        assert!(d("1e13").unwrap_err().contains("out of range"));
        assert!(d("1e99999999999").unwrap_err().contains("out of range"));
        assert!(d("0.0000001").unwrap_err().contains("6 decimal places"));
        assert!(d("1e-7").unwrap_err().contains("6 decimal places"));
        let long = "1".repeat(60) + ".5";
        assert!(d(&long).unwrap_err().contains("out of range"));
    }

    #[test]
    fn integers_out_of_range_and_malformed_numbers_are_located_errors() {
        let e = parse("[1,\n  9223372036854775808]").unwrap_err();
        assert_eq!((e.line, e.col), (2, 3));
        assert!(e.msg.contains("out of range"), "{e}");
        assert_eq!(
            parse("-9223372036854775808").unwrap().value,
            Value::Int(i64::MIN)
        );
        for bad in ["01", "1.", "-", "1e", "1.2.3", "1-2", "+1", ".5", "1e+"] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let s = "[".repeat(10_000);
        let e = parse(&s).unwrap_err();
        assert!(e.msg.contains("nesting"), "{e}");
        let ok = "[".repeat(MAX_DEPTH as usize) + &"]".repeat(MAX_DEPTH as usize);
        assert!(parse(&ok).is_ok());
    }

    #[test]
    fn display_names_line_and_column() {
        let e = parse("\n\n   x").unwrap_err();
        assert_eq!(e.to_string(), "line 3, column 4: unexpected character 'x'");
        assert_eq!(e.path, "");
    }
}
