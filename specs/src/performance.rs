//! Which metrics of a curve are performance figures: reported side by side, never gated (a
//! step time or a throughput differs between a mesh and one device by design).

/// Performance figures by name. Rates of tokens (`tok/s`, `tokens_per_sec`,
/// `tps`, `throughput`) are performance; a token *count* (`tokens`, `num_tokens`) is not — a
/// wrong count is a correctness bug (local vs global loss normalization) and stays gated.
pub fn is_performance(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let rate = ["/s", "per_s", "_ps", "tps", "throughput", "mfu"]
        .iter()
        .any(|p| n.contains(p) || n.ends_with(p.trim_start_matches('_')));
    rate || ["time", "mem", "latency"].iter().any(|p| n.contains(p))
}

#[cfg(test)]
mod tests {
    use super::is_performance;

    #[test]
    fn times_rates_and_memory_are_performance_counts_are_not() {
        for name in [
            "step_time_s",
            "tokens_per_sec",
            "tok/s",
            "mfu",
            "max_mem_gib",
            "latency",
        ] {
            assert!(is_performance(name), "{name}");
        }
        for name in ["loss", "grad_norm", "tokens", "num_tokens", "lr", "lb_loss"] {
            assert!(!is_performance(name), "{name}");
        }
    }
}
