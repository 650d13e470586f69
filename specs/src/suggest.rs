//! "Did you mean" suggestions for misspelt keys and names.

/// The closest candidate to `word`, if it is close enough to be a plausible typo.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word_l = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(&word_l, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `did you mean `x`?` or a list of what is allowed when nothing is close.
pub fn did_you_mean(word: &str, candidates: &[&str], what: &str) -> String {
    match closest(word, candidates.iter().copied()) {
        Some(c) => format!("did you mean `{c}`?"),
        None if candidates.is_empty() => format!("no {what} is defined"),
        None => format!("expected one of: {}", quote_list(candidates)),
    }
}

pub fn quote_list(items: &[&str]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_typos_and_rejects_strangers() {
        assert_eq!(closest("hiden", ["hidden", "heads"]), Some("hidden"));
        assert_eq!(closest("kv_head", ["heads", "kv_heads"]), Some("kv_heads"));
        assert_eq!(closest("zzzzzz", ["hidden", "heads"]), None);
    }
}
