//! A small JSON parser that keeps source positions and object key order.
//!
//! rt-app workloads depend on the order of keys inside a phase (events run in file
//! order) and tolerate repeated keys (`"run": 10, "sleep": 5, "run": 10`), and every
//! error we report must name the line it comes from. `serde_json::Value` gives up
//! both, so the workload reader uses this instead. Objects are kept as an ordered
//! list of `(key, value)` pairs; every value carries the line and column where it
//! starts.

use std::fmt;

/// A parsed JSON value with the position of its first character.
#[derive(Clone, Debug, PartialEq)]
pub struct Spanned {
    /// 1-based line of the value's first character.
    pub line: u32,
    /// 1-based column of the value's first character.
    pub col: u32,
    /// The value itself.
    pub value: Value,
}

/// A JSON value. Numbers keep their integer form when they have one, so that
/// `-1` and `1.5` can be told apart without rounding.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number written without fraction or exponent that fits an `i64`.
    Int(i64),
    /// Any other number.
    Float(f64),
    /// A string, unescaped.
    Str(String),
    /// An array.
    Array(Vec<Spanned>),
    /// An object: keys in file order, repeats kept. Each key carries the line it is on.
    Object(Vec<(String, u32, Spanned)>),
}

impl Value {
    /// The JSON type name, for "expected X, found Y" messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
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

/// Nesting limit: a hostile file cannot overflow the stack.
const MAX_DEPTH: u32 = 128;

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
        let mut path = String::new();
        for seg in &self.path {
            if !seg.starts_with('[') && !path.is_empty() {
                path.push('.');
            }
            path.push_str(seg);
        }
        SyntaxError {
            line: self.line,
            col: self.col,
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
            self.line += 1;
            self.col = 1;
        } else if c & 0xc0 != 0x80 {
            // Count characters, not UTF-8 continuation bytes.
            self.col += 1;
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
            Some(c) => return Err(self.err(format!("unexpected character '{}'", c as char))),
        };
        Ok(Spanned { line, col, value })
    }

    fn enter(&mut self) -> Result<(), SyntaxError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("nesting deeper than 128 levels"));
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
            let key_line = self.line;
            let key = self.string()?;
            self.skip_ws()?;
            if self.bump() != Some(b':') {
                return Err(self.err(format!("expected ':' after key \"{key}\"")));
            }
            self.skip_ws()?;
            self.path.push(key.clone());
            let v = self.value()?;
            self.path.pop();
            members.push((key, key_line, v));
            self.skip_ws()?;
            match self.bump() {
                Some(b',') => continue,
                Some(b'}') => break,
                _ => return Err(self.err("expected ',' or '}' in object")),
            }
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
            match self.bump() {
                Some(b',') => continue,
                Some(b']') => break,
                _ => return Err(self.err("expected ',' or ']' in array")),
            }
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

    fn number(&mut self) -> Result<Value, SyntaxError> {
        let start = self.pos;
        let mut is_float = false;
        while let Some(c) = self.peek() {
            match c {
                b'0'..=b'9' | b'-' | b'+' => {}
                b'.' | b'e' | b'E' => is_float = true,
                _ => break,
            }
            self.bump();
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        if !is_float {
            if let Ok(i) = text.parse::<i64>() {
                return Ok(Value::Int(i));
            }
        }
        match text.parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Value::Float(f)),
            _ => Err(self.err(format!("malformed number '{text}'"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_duplicates_and_lines() {
        let v = parse("{\n \"run\": 10,\n \"sleep\": 5,\n \"run\": -3 }").unwrap();
        let Value::Object(m) = v.value else {
            panic!("not an object")
        };
        let keys: Vec<_> = m.iter().map(|(k, l, _)| (k.as_str(), *l)).collect();
        assert_eq!(keys, [("run", 2), ("sleep", 3), ("run", 4)]);
        assert_eq!(m[2].2.value, Value::Int(-3));
    }

    #[test]
    fn reports_position_of_syntax_errors() {
        let e = parse("{\n  \"a\": 1,\n  \"b\" 2\n}").unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.msg.contains("':'"), "{e}");
        let e = parse("[1, 2").unwrap_err();
        assert_eq!(e.line, 1);
    }

    #[test]
    fn numbers_strings_comments() {
        let v = parse("/* c */ [1.5, \"a\\n\\u0041\", true, null, -0] // end").unwrap();
        let Value::Array(a) = v.value else { panic!() };
        assert_eq!(a[0].value, Value::Float(1.5));
        assert_eq!(a[1].value, Value::Str("a\nA".into()));
        assert_eq!(a[4].value, Value::Int(0));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let s = "[".repeat(10_000);
        assert!(parse(&s).is_err());
    }
}
