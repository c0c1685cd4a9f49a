//! A Prometheus histogram: cumulative bucket counts over fixed upper bounds,
//! a count and a sum, rendered as `_bucket{le=…}`, `_sum` and `_count`. The
//! device plugin's Allocate latency and DRA mode's prepare latency are two.

use std::fmt::Write as _;

use crate::prometheus::push_labels;

/// Observations against fixed bucket upper bounds (ascending, seconds or any
/// unit); `+Inf` is implied.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Observations `<=` each bound (cumulative, as the format has them).
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    /// An empty histogram over `bounds`.
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "bucket bounds must ascend: {bounds:?}");
        Self { bounds, buckets: vec![0; bounds.len()], count: 0, sum: 0.0 }
    }

    /// Records one observation.
    pub fn observe(&mut self, v: f64) {
        for (n, b) in self.buckets.iter_mut().zip(self.bounds) {
            if v <= *b {
                *n += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }

    /// How many observations were recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Appends the series of `name` with `labels` (escaped) on every line, `le`
    /// last on the buckets. The family head ([`crate::prometheus::head`], kind
    /// `histogram`) is the caller's: one head serves many label sets.
    pub fn render(&self, out: &mut String, name: &str, labels: &[(&str, &str)]) {
        for (b, n) in self.bounds.iter().zip(&self.buckets) {
            let _ = write!(out, "{name}_bucket");
            push_labels(out, labels, Some(("le", &b.to_string())));
            let _ = writeln!(out, " {n}");
        }
        let _ = write!(out, "{name}_bucket");
        push_labels(out, labels, Some(("le", "+Inf")));
        let _ = writeln!(out, " {}", self.count);
        let _ = write!(out, "{name}_sum");
        push_labels(out, labels, None);
        let _ = writeln!(out, " {}", self.sum);
        let _ = write!(out, "{name}_count");
        push_labels(out, labels, None);
        let _ = writeln!(out, " {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [f64; 3] = [0.001, 0.01, 0.1];

    #[test]
    fn buckets_are_cumulative_and_inf_is_the_count() {
        let mut h = Histogram::new(&BOUNDS);
        for v in [0.0005, 0.001, 0.05, 3.0] {
            h.observe(v);
        }
        assert_eq!(h.count(), 4);
        let mut o = String::new();
        h.render(&mut o, "x_seconds", &[("resource", "kuberdma.io/a")]);
        assert_eq!(
            o,
            "x_seconds_bucket{resource=\"kuberdma.io/a\",le=\"0.001\"} 2\n\
             x_seconds_bucket{resource=\"kuberdma.io/a\",le=\"0.01\"} 2\n\
             x_seconds_bucket{resource=\"kuberdma.io/a\",le=\"0.1\"} 3\n\
             x_seconds_bucket{resource=\"kuberdma.io/a\",le=\"+Inf\"} 4\n\
             x_seconds_sum{resource=\"kuberdma.io/a\"} 3.0515\n\
             x_seconds_count{resource=\"kuberdma.io/a\"} 4\n"
        );
    }

    #[test]
    fn without_labels_only_the_buckets_carry_le() {
        let mut h = Histogram::new(&BOUNDS);
        h.observe(0.02);
        let mut o = String::new();
        h.render(&mut o, "y", &[]);
        assert!(o.starts_with("y_bucket{le=\"0.001\"} 0\n"), "{o}");
        assert!(o.ends_with("y_bucket{le=\"+Inf\"} 1\ny_sum 0.02\ny_count 1\n"), "{o}");
    }
}
