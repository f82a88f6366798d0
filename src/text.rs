//! Text kept bounded: error text kept on a run or written to a log line stays short however
//! much a builder or a broker said. A leaf module, so that any module may use it.

/// `s` cut to at most `max` bytes on a character boundary: error text kept on a run or written
/// to a log line stays bounded however much a builder or a broker said.
pub fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
