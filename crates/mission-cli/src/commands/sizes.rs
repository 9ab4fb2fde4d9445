//! Sizes in bytes as flags take them: `512`, `64K`, `10M`, `100G`, `1T` (powers of 1024).

/// A size in bytes, written `123`, `64K`, `10M`, `100G` or `1T` (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl std::str::FromStr for Size {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        parse_size(raw).map(Size)
    }
}

impl std::fmt::Display for Size {
    /// The largest unit that writes the size exactly.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (mut n, mut units) = (self.0, ["", "K", "M", "G", "T"].iter());
        let mut unit = units.next().expect("units");
        while n != 0 && n % 1024 == 0 && units.len() > 0 {
            n /= 1024;
            unit = units.next().expect("checked");
        }
        write!(f, "{n}{unit}")
    }
}

/// Parses `123`, `64K`, `10M`, `100G`, `1T` (powers of 1024).
fn parse_size(raw: &str) -> Result<u64, String> {
    let raw = raw.trim();
    let (digits, shift) = match raw.char_indices().last() {
        Some((i, 'K' | 'k')) => (&raw[..i], 10),
        Some((i, 'M' | 'm')) => (&raw[..i], 20),
        Some((i, 'G' | 'g')) => (&raw[..i], 30),
        Some((i, 'T' | 't')) => (&raw[..i], 40),
        _ => (raw, 0),
    };
    let n: u64 =
        digits.trim().parse().map_err(|_| format!("expected a size like 512, 64K, 10M, 100G or 1T, got {raw:?}"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{raw:?} is too large"))
}

/// A log cap: a size of at least [`mission_api::MIN_LOG_CAP`].
pub fn log_cap(raw: &str) -> Result<Size, String> {
    let size = parse_size(raw)?;
    if size < mission_api::MIN_LOG_CAP {
        return Err(format!("a log cap is at least {} bytes", Size(mission_api::MIN_LOG_CAP)));
    }
    Ok(Size(size))
}

#[cfg(test)]
mod tests {
    use super::{Size, log_cap, parse_size};

    #[test]
    fn sizes_show_in_their_largest_exact_unit() {
        assert_eq!(Size(100 << 30).to_string(), "100G");
        assert_eq!(Size(1 << 40).to_string(), "1T");
        assert_eq!(Size(1536).to_string(), "1536");
        assert_eq!(Size(0).to_string(), "0");
        assert_eq!("64K".parse::<Size>(), Ok(Size(64 << 10)));
    }

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("100G"), Ok(100 << 30));
        assert_eq!(parse_size("1t"), Ok(1 << 40));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("99999999T").is_err());
        assert_eq!(log_cap("4K"), Ok(Size(4096)));
        assert!(log_cap("1000").unwrap_err().contains("at least 1K"));
    }
}
