//! Reproducible random streams: xoshiro256++ seeded through SplitMix64, and
//! the ziggurat method for exponential variates.
//!
//! Design: every consumer of randomness (one class at one station for one
//! purpose) owns its own stream, whose state is derived only from
//! `(seed, replication, stream id)`. Streams therefore do not depend on the
//! order in which events consume numbers, which gives bit-identical reruns
//! and common random numbers across what-if variants: changing one station
//! leaves every other station's draws untouched. Both generators are tiny
//! public-domain algorithms (Blackman & Vigna), implemented here to avoid a
//! dependency.

/// SplitMix64: used only to expand a 64-bit seed into generator states.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// Next 64-bit output.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// What a stream is used for; part of the stream id.
#[derive(Debug, Clone, Copy)]
#[repr(u64)]
pub enum Purpose {
    Service = 1,
    Routing = 2,
    RetryTimeout = 3,
    Interarrival = 4,
    Entry = 5,
    /// Completion clocks and picks of a station served as an exponential race.
    Race = 6,
    /// The network-wide clock of a Markovian model.
    Markov = 7,
    /// Phases of CPU quota periods.
    Quota = 8,
    /// Rows of the demand table drawn by requests.
    Rows = 9,
}

/// Stream id of `(purpose, class, station)`; distinct for every triple.
pub fn stream_id(purpose: Purpose, class: usize, station: usize) -> u64 {
    ((purpose as u64) << 56) ^ ((class as u64) << 28) ^ (station as u64)
}

/// xoshiro256++ generator.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// Generator with the raw state `s` (used by the reference-vector test).
    pub fn from_state(s: [u64; 4]) -> Self {
        Rng { s }
    }

    /// The independent stream `stream` of replication `replication` of `seed`.
    pub fn stream(seed: u64, replication: u64, stream: u64) -> Self {
        // Each coordinate passes through a full SplitMix64 mix, so seeds,
        // replications and ids that differ in one bit give unrelated states.
        let mut h = SplitMix64(seed).next_u64();
        h = SplitMix64(h ^ replication).next_u64();
        h = SplitMix64(h ^ stream).next_u64();
        let mut sm = SplitMix64(h);
        let mut s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        if s == [0; 4] {
            // The all-zero state is the generator's only fixed point.
            s[0] = 1;
        }
        Rng { s }
    }

    /// Next 64-bit output.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform on [0, 1) with 53 random bits.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform on (0, 1]: never 0, so `ln` of it is finite.
    #[inline]
    pub fn open_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in `0..n` (Lemire's multiply-shift; the bias, below
    /// `n / 2^64`, is far beneath anything a simulation can detect).
    #[inline]
    pub fn below(&mut self, n: u32) -> u32 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u32
    }

    /// Exponential with mean 1, by the ziggurat method (Marsaglia & Tsang
    /// 2000, 256 layers, as in `rand_distr`): one 64-bit draw and a
    /// multiplication in about 99 % of the calls, with no logarithm. The
    /// layer comes from the low 8 bits and the abscissa from the top 52, so
    /// they are independent. Exact: the rare rejections and the tail beyond
    /// `R` (sampled by memorylessness as `R + Exp(1)`) complete the density.
    #[inline]
    pub fn exp1(&mut self) -> f64 {
        let z = ziggurat();
        loop {
            let bits = self.next_u64();
            let i = (bits & 0xff) as usize;
            // In (0, 1]: the 52 top bits plus one half-step.
            let u = ((bits >> 12) as f64 + 1.0) * (1.0 / (1u64 << 52) as f64);
            let x = u * z.x[i];
            if x < z.x[i + 1] {
                return x;
            }
            if let Some(x) = self.exp1_slow(z, i, x) {
                return x;
            }
        }
    }

    /// The base layer's tail and the wedge tests of [`Rng::exp1`].
    #[cold]
    fn exp1_slow(&mut self, z: &Ziggurat, i: usize, x: f64) -> Option<f64> {
        if i == 0 {
            return Some(ZIG_EXP_R - self.open_unit().ln());
        }
        let y = z.f[i + 1] + (z.f[i] - z.f[i + 1]) * self.unit();
        (y < (-x).exp()).then_some(x)
    }

    /// Standard normal (Box–Muller, one output per call to keep streams stateless).
    pub fn normal(&mut self) -> f64 {
        let r = (-2.0 * self.open_unit().ln()).sqrt();
        r * (std::f64::consts::TAU * self.unit()).cos()
    }
}

/// Layers of the exponential ziggurat.
const ZIG_LAYERS: usize = 256;
/// Right edge of the base layer of the 256-layer exponential ziggurat.
const ZIG_EXP_R: f64 = 7.697_117_470_131_487;
/// Area of every layer (the base includes the tail beyond `R`).
const ZIG_EXP_V: f64 = 0.003_949_659_822_581_557;

/// Layer edges `x[i]` (with `x[0] = V / f(R)` for the base and `x[256] = 0`)
/// and the density at them, `f[i] = exp(-x[i])`.
#[derive(Debug)]
pub struct Ziggurat {
    x: [f64; ZIG_LAYERS + 1],
    f: [f64; ZIG_LAYERS + 1],
}

/// The tables, built once per process by the standard recurrence
/// `x[i+1] = f^-1(f(x[i]) + V / x[i])`.
#[inline]
fn ziggurat() -> &'static Ziggurat {
    static TABLES: std::sync::OnceLock<Ziggurat> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut x = [0.0; ZIG_LAYERS + 1];
        x[0] = ZIG_EXP_V / (-ZIG_EXP_R).exp();
        x[1] = ZIG_EXP_R;
        for i in 2..ZIG_LAYERS {
            x[i] = -(ZIG_EXP_V / x[i - 1] + (-x[i - 1]).exp()).ln();
        }
        let f = x.map(|v| (-v).exp());
        Ziggurat { x, f }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ziggurat_layers_close_at_the_mode() {
        // The recurrence must land the top layer on f(0) = 1 (area V each).
        let z = ziggurat();
        let top = ZIG_EXP_V / z.x[ZIG_LAYERS - 1] + z.f[ZIG_LAYERS - 1];
        assert!((top - 1.0).abs() < 1e-9, "top layer ends at f = {top}");
        assert!(z.x.windows(2).skip(1).all(|w| w[0] > w[1]));
    }

    #[test]
    fn exponential_variates_follow_exp1() {
        // Kolmogorov–Smirnov against 1 - exp(-x) on 200k draws (critical
        // value at 0.1 %: 1.95 / sqrt(n)), plus moments and the far tail,
        // which only the base layer's tail branch can produce.
        let mut r = Rng::stream(11, 0, 3);
        let n = 200_000;
        let mut xs: Vec<f64> = (0..n).map(|_| r.exp1()).collect();
        xs.sort_by(f64::total_cmp);
        let d = xs
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                let cdf = 1.0 - (-x).exp();
                (cdf - i as f64 / n as f64).max((i + 1) as f64 / n as f64 - cdf)
            })
            .fold(0.0, f64::max);
        assert!(d < 1.95 / (n as f64).sqrt(), "KS distance {d}");
        let mean = xs.iter().sum::<f64>() / n as f64;
        let m2 = xs.iter().map(|x| x * x).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.01, "mean {mean}");
        assert!((m2 - 2.0).abs() < 0.05, "second moment {m2}");
        // P(X > 8) = exp(-8): about 3.4e-4, i.e. 3,355 of 10 M draws.
        let tail = (0..10_000_000).filter(|_| r.exp1() > 8.0).count() as f64;
        let want = 1e7 * (-8.0f64).exp();
        assert!(
            (tail - want).abs() < 4.0 * want.sqrt(),
            "tail {tail} vs {want}"
        );
    }

    #[test]
    fn below_is_uniform() {
        let mut r = Rng::stream(5, 0, 0);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[r.below(7) as usize] += 1;
        }
        // Chi-square with 6 degrees of freedom, 0.1 % critical value 22.5.
        let chi2: f64 = counts
            .iter()
            .map(|&c| (f64::from(c) - 10_000.0).powi(2) / 10_000.0)
            .sum();
        assert!(chi2 < 22.5, "{counts:?}");
    }

    #[test]
    fn splitmix64_reference_output() {
        // First output of SplitMix64 from state 0 (Vigna's reference code).
        assert_eq!(SplitMix64(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn xoshiro256pp_reference_outputs() {
        // Reference outputs from state [1, 2, 3, 4] (as in rand_xoshiro's tests).
        let mut r = Rng::from_state([1, 2, 3, 4]);
        let expected: [u64; 10] = [
            41943041,
            58720359,
            3588806011781223,
            3591011842654386,
            9228616714210784205,
            9973669472204895162,
            14011001112246962877,
            12406186145184390807,
            15849039046786891736,
            10450023813501588000,
        ];
        for e in expected {
            assert_eq!(r.next_u64(), e);
        }
    }

    #[test]
    fn streams_differ_by_each_coordinate() {
        let base = Rng::stream(7, 0, 1).next_u64();
        assert_eq!(base, Rng::stream(7, 0, 1).next_u64());
        assert_ne!(base, Rng::stream(8, 0, 1).next_u64());
        assert_ne!(base, Rng::stream(7, 1, 1).next_u64());
        assert_ne!(base, Rng::stream(7, 0, 2).next_u64());
    }

    #[test]
    fn uniforms_stay_in_range() {
        let mut r = Rng::stream(1, 0, 0);
        for _ in 0..10_000 {
            let u = r.unit();
            let v = r.open_unit();
            assert!((0.0..1.0).contains(&u));
            assert!(v > 0.0 && v <= 1.0);
        }
    }
}
