//! Shell words: a path or value written into a command line a user can paste (the `meshparity
//! compare` line of a verdict, a command engine's rendered template).

/// A shell word: as is when it is plain, else single-quoted.
pub fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_./-=:,@+".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}
