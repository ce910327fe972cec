//! Go's `strconv` parsers of flag and environment values, shared by the installer's flags and
//! the controller's environment.

/// Go's `strconv.ParseBool`.
pub(crate) fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`: optional sign, `0x`/`0o`/`0b`/leading-`0` prefixes,
/// `_` between digits. The error is Go's reason text.
pub(crate) fn parse_go_int(s: &str) -> Result<i64, &'static str> {
    const PARSE: &str = "parse error";
    const RANGE: &str = "value out of range";
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = body.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Underscores only between digits (or right after a base prefix).
    if digits.contains('_') {
        let bytes = digits.as_bytes();
        let bad_start = bytes[0] == b'_' && !prefixed;
        if bad_start || bytes[bytes.len() - 1] == b'_' || digits.contains("__") {
            return Err(PARSE);
        }
    }
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    // Syntax errors first, as Go reports them before a range error.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(PARSE);
    }
    let value = u128::from_str_radix(&digits, radix).map_err(|_| RANGE)?;
    let value = i128::try_from(value).map_err(|_| RANGE)?;
    i64::try_from(if neg { -value } else { value }).map_err(|_| RANGE)
}
