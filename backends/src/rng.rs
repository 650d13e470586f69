//! Deterministic values from (seed, name): every parameter and every batch is a pure function
//! of the run seed and its own name, so init does not depend on creation order and a shard can
//! be regenerated without the rest of the model.

/// splitmix64: tiny, fast, and the same on every platform.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64, stream: &str) -> Self {
        // FNV-1a of the stream name, mixed into the seed.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in stream.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        Self(seed ^ h.rotate_left(17))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1), 53 bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// `n` values uniform in [-scale, scale).
pub fn uniform(seed: u64, stream: &str, n: usize, scale: f64) -> Vec<f64> {
    let mut r = SplitMix::new(seed, stream);
    (0..n).map(|_| r.uniform() * scale).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_deterministic_and_independent() {
        assert_eq!(uniform(1, "a", 4, 1.0), uniform(1, "a", 4, 1.0));
        assert_ne!(uniform(1, "a", 4, 1.0), uniform(1, "b", 4, 1.0));
        assert_ne!(uniform(1, "a", 4, 1.0), uniform(2, "a", 4, 1.0));
        assert!(uniform(3, "x", 1000, 0.5)
            .iter()
            .all(|v| (-0.5..0.5).contains(v)));
    }
}
