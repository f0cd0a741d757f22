package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// spread is a median with the lowest and highest of the samples it was
// taken from: every figure of the report is one, so that the noise of a
// shared machine shows beside the figure.
type spread struct {
	Median, Min, Max float64
	N                int
}

// spreadOf summarises samples; the median of an even count is the mean of
// the middle two.
func spreadOf(samples []float64) spread {
	if len(samples) == 0 {
		return spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return spread{Median: med, Min: s[0], Max: s[n-1], N: n}
}

// ratios divides a by b sample by sample (a round's ratio is taken within
// the round); a pair with a missing or zero b is left out.
func ratios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

// quantile returns the q-quantile of sorted durations (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(len(sorted)-1, i))]
}

// fmtRate formats a rate per second with a thousands separator, e.g. 12,345.
func fmtRate(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	n := int64(math.Round(v))
	neg := n < 0
	if neg {
		n = -n
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// fmtRatio formats a ratio with two decimals and a multiplication sign.
func fmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

// fmtSpread formats a spread with f: "median (min–max)".
func fmtSpread(s spread, f func(float64) string) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

// fmtDur formats a latency in the unit that suits it: 85 µs, 1.2 ms, 3.4 s.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
}

// fmtBytes formats a byte count in binary units: 812 B, 14.2 KiB, 3.1 MiB.
func fmtBytes(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "–"
	case a < 1<<10:
		return fmt.Sprintf("%.0f B", v)
	case a < 1<<20:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	case a < 1<<30:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	}
}
