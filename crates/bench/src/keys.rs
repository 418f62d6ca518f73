//! Key spaces, values and the random choices a workload makes.
//!
//! Everything here is deterministic from a seed, so a run can be repeated exactly.
//! The generator is SplitMix64: tiny, fast, and good enough to pick keys; it is not
//! for anything that needs unpredictability. The zipfian generator is YCSB's
//! (Gray et al., "Quickly generating billion-record synthetic databases").

use std::io::Write;

/// SplitMix64: a small, fast, seedable generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0); the modulo bias is negligible for key spaces.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// How a workload picks the next key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Distribution {
    Uniform,
    Zipfian,
}

/// Draws key indexes in `0..n`, uniformly or zipfian (theta 0.99, hot keys scattered).
#[derive(Clone, Debug)]
pub enum KeyChooser {
    Uniform { n: u64 },
    Zipfian(Zipfian),
}

impl KeyChooser {
    pub fn new(distribution: Distribution, n: u64) -> KeyChooser {
        match distribution {
            Distribution::Uniform => KeyChooser::Uniform { n },
            Distribution::Zipfian => KeyChooser::Zipfian(Zipfian::new(n, 0.99)),
        }
    }

    pub fn next(&self, rng: &mut Rng) -> u64 {
        match self {
            KeyChooser::Uniform { n } => rng.below(*n),
            KeyChooser::Zipfian(z) => z.next_scattered(rng),
        }
    }
}

/// YCSB's zipfian generator over `0..n`.
#[derive(Clone, Debug)]
pub struct Zipfian {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    pub fn new(n: u64, theta: f64) -> Zipfian {
        assert!(n > 0);
        let zeta = |count: u64| {
            (1..=count)
                .map(|i| 1.0 / (i as f64).powf(theta))
                .sum::<f64>()
        };
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipfian {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }

    /// Rank 0 is the hottest.
    pub fn next_rank(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }

    /// A rank hashed onto the key space, so the hot keys are not all neighbours.
    pub fn next_scattered(&self, rng: &mut Rng) -> u64 {
        let rank = self.next_rank(rng);
        let mut mix = Rng::new(rank);
        mix.next_u64() % self.n
    }
}

/// The name of key `index` under `prefix`, e.g. `kb:00000042`.
pub fn key_name(buf: &mut Vec<u8>, prefix: &str, index: u64) {
    buf.clear();
    buf.extend_from_slice(prefix.as_bytes());
    // Writing into a Vec cannot fail.
    let _ = write!(buf, "{index:08}");
}

/// A value of `len` printable bytes that depends on `seed`, so values differ.
pub fn value_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| b'a' + rng.below(26) as u8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            let k = rng.below(10);
            seen[k as usize] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let z = Zipfian::new(1000, 0.99);
        let mut rng = Rng::new(1);
        let mut rank0 = 0;
        for _ in 0..10_000 {
            let r = z.next_rank(&mut rng);
            assert!(r < 1000);
            if r == 0 {
                rank0 += 1;
            }
            assert!(z.next_scattered(&mut rng) < 1000);
        }
        // Rank 0 of 1000 at theta 0.99 has probability ~ 1/zeta(1000) ~ 13%.
        assert!(rank0 > 800 && rank0 < 2000, "rank0 {rank0}");
    }

    #[test]
    fn key_names_are_fixed_width() {
        let mut buf = Vec::new();
        key_name(&mut buf, "kb:", 42);
        assert_eq!(buf, b"kb:00000042");
    }
}
