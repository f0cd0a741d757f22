package fetcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp/syntax"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
)

// issuePattern is the pattern of the first security review: n alternatives of
// [a-z<rune>]{1000}X, a program of about 1000 instructions each.
func issuePattern(n int) string {
	alts := make([]string, n)
	for i := range alts {
		alts[i] = fmt.Sprintf("[a-z%c]{1000}X", rune(0x100+i))
	}
	return strings.Join(alts, "|")
}

// heavyPattern is the costliest program the default limits let through:
// exactly DefaultMaxGrepInsts instructions, none of them ever failing
// early on lower-case text.
const heavyPattern = "[a-z]{997}X"

// progSize is the size of pattern's program as regexp.Compile builds it.
func progSize(t *testing.T, pattern string) int {
	t.Helper()
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		t.Fatalf("parse %q: %v", pattern, err)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		t.Fatalf("compile %q: %v", pattern, err)
	}
	return len(prog.Inst)
}

func TestCompileGrep(t *testing.T) {
	t.Parallel()
	f := New(Options{})

	accept := func(pattern string, regexp bool) {
		t.Helper()
		g, reason := f.compileGrep(pattern)
		if reason != "" || g == nil {
			t.Errorf("compileGrep(%.40q) refused: %s", pattern, reason)
			return
		}
		if got := g.re != nil; got != regexp {
			t.Errorf("compileGrep(%.40q): regexp %v, want %v", pattern, got, regexp)
		}
	}
	refuse := func(pattern, want string) {
		t.Helper()
		g, reason := f.compileGrep(pattern)
		if g != nil || reason != want {
			t.Errorf("compileGrep(%.40q) = %v, %q; want refused with %q", pattern, g, reason, want)
		}
	}
	tooComplex := "grep pattern too complex: its program is over 1000 instructions"

	if n := progSize(t, heavyPattern); n != DefaultMaxGrepInsts {
		t.Fatalf("heavyPattern is %d instructions, want %d", n, DefaultMaxGrepInsts)
	}
	accept(heavyPattern, true)
	refuse("[a-z]{998}X", tooComplex)
	accept(`(?i)price|cost|fee`, true)
	accept(`\d{4}-\d{2}-\d{2}`, true)
	accept("f(x", false)                                        // does not parse: a literal
	accept(strings.Repeat("[ab]", DefaultMaxGrepBytes/4), true) // 1024 bytes, 258 instructions
	refuse(strings.Repeat("x", 999), tooComplex)                // a regexp of 999 literal runes: 1001 instructions
	refuse(strings.Repeat("x", DefaultMaxGrepBytes+1), "grep pattern too large: 1025 bytes (max 1024)")
	refuse(strings.Repeat("(", DefaultMaxGrepBytes+1), "grep pattern too large: 1025 bytes (max 1024)") // a literal, still capped
	refuse(issuePattern(1000), "grep pattern too large: 14999 bytes (max 1024)")
	refuse(issuePattern(2), tooComplex)
	refuse(strings.Repeat("[a-z]{1000}|", 9)+"x", tooComplex) // 9,000 instructions: counted, never built
	accept(`(?:a{100}){100}`, false)                          // Go refuses nested repeats over 1000: a literal

	deep := New(Options{MaxGrepBytes: 4000})
	if _, reason := deep.compileGrep(strings.Repeat("(", 1001) + strings.Repeat(")", 1001)); reason != tooComplex {
		t.Errorf("1001 nested groups (Go's \"expression nests too deeply\"): %q, want %q", reason, tooComplex)
	}
	small := New(Options{MaxGrepBytes: 8, MaxGrepInsts: 10})
	if _, reason := small.compileGrep("abcdefghi"); reason != "grep pattern too large: 9 bytes (max 8)" {
		t.Errorf("MaxGrepBytes 8: %q", reason)
	}
	if _, reason := small.compileGrep("a{9}"); reason != "grep pattern too complex: its program is over 10 instructions" {
		t.Errorf("MaxGrepInsts 10: %q", reason)
	}
}

// The estimate that guards the build of a program is close to its real
// size, so that it never refuses what the exact count would accept.
func TestProgEstimate(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		"a", "abc", "(?i)abc", "a|b|c", "(a)(b)", "a*b+c?", "[a-z]{997}X", `\w{10,20}`, "a{3,}",
		"(?:ab){50}", "(?:a|b){0,100}", `^\bx$`, `(?s).*`, "(?:(?:a{10}){10}){5}", "x{0}", "(?:)",
		`(?i)(?:hello world ){20}`, `\d{4}-\d{2}-\d{2}`,
	} {
		re, err := syntax.Parse(p, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		est, exact := progEstimate(re, 1<<20), progSize(t, p)
		if est < exact/2 || est > 2*exact {
			t.Errorf("progEstimate(%q) = %d, exact %d: not within a factor of 2", p, est, exact)
		}
	}
	re, err := syntax.Parse("(?:a{10}){100}", syntax.Perl)
	if err != nil {
		t.Fatal(err)
	}
	if got := progEstimate(re, 100); got != 101 {
		t.Errorf("progEstimate over the limit = %d, want 101", got)
	}
}

func TestGrepLines_Windows(t *testing.T) {
	t.Parallel()
	g, _ := New(Options{}).compileGrep("needle[0-9]")

	f := func(name, line string, want bool) {
		t.Helper()
		ok, err := g.match(t.Context(), line)
		if err != nil || ok != want {
			t.Errorf("%s (%d bytes): match = %v, %v; want %v", name, len(line), ok, err, want)
		}
	}
	pad := func(n int) string { return strings.Repeat("é", n/2) } // 2-byte runes: windows cut at rune boundaries
	f("short", "a needle1 b", true)
	f("at the end of a long line", pad(100<<10)+"needle7", true)
	f("at the start of a long line", "needle7"+pad(100<<10), true)
	f("none in a long line", pad(100<<10)+"needle", false)
	step := GrepWindow - GrepOverlap
	for _, at := range []int{step - 3, GrepWindow - 3, 2*step - 5, GrepWindow - 7} {
		line := strings.Repeat("a", at) + "needle5" + strings.Repeat("b", 3*GrepWindow)
		f(fmt.Sprintf("across a window edge at %d", at), line, true)
	}
	// A match as long as the overlap, anywhere, among 3-byte runes.
	long, _ := New(Options{}).compileGrep("x[^x]*x")
	var ats []int // every start near the first two window edges, and a few more
	for k := 1; k <= 2; k++ {
		for d := -16; d <= 16; d++ {
			ats = append(ats, k*step+d)
		}
	}
	for _, at := range append(ats, 0, 1, 2, 700, GrepWindow, 3*GrepWindow) {
		line := strings.Repeat("€", at/3) + strings.Repeat("a", at%3) + "x" + strings.Repeat("€", (GrepOverlap-2)/3) +
			strings.Repeat("a", (GrepOverlap-2)%3) + "x" + strings.Repeat("€", GrepWindow)
		if ok, err := long.match(t.Context(), line); !ok || err != nil {
			t.Errorf("a %d-byte match at %d of a %d-byte line: %v, %v; want found", GrepOverlap, at, len(line), ok, err)
		}
	}
}

// A grep checks its context between lines and within long lines: the
// costliest pattern the limits allow, over a 2 MiB page of one line (some
// 15s of CPU on one core), ends with the fetch's 1s deadline, as outcome
// timeout.
func TestFetcher_GrepDeadline(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"OneLine", "ManyLines"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			body := strings.Repeat("abcdefghij", (2<<20)/10)
			if shape == "ManyLines" {
				body = strings.Repeat(strings.Repeat("abcdefghij", 499)+"\n", (2<<20)/4991) // 5 KB lines
			}
			b.mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.Write([]byte(body))
			})
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			start := time.Now()
			_, err := b.f.Fetch(ctx, batch.Caller{Name: "test"}, batch.Target{URL: b.base + "/big", Options: batchsift.Fields{Grep: heavyPattern}.JSON()})
			took := time.Since(start)
			b.wantErr(t, err, b.base+"/big", batch.OutcomeTimeout, "timeout: grep did not finish before the deadline")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %q does not match context.DeadlineExceeded", err)
			}
			t.Logf("%s: %d bytes, a %d-instruction pattern, 1s deadline: returned after %s",
				shape, len(body), DefaultMaxGrepInsts, took.Round(time.Millisecond))
		})
	}
}

// A pattern over the limits fails the fetch with outcome unsupported
// before anything is fetched, and CheckTarget refuses it at submit with a
// hint.
func TestFetcher_GrepRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var hits atomic.Int64
	b.mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(strings.Repeat("abcdefghij", 500))) // the review's 5 KB body
	})
	for _, c := range []struct{ name, pattern, reason string }{
		{"Large", issuePattern(100), "grep pattern too large: 1499 bytes (max 1024)"}, // the review's 1.6 KB
		{"Complex", issuePattern(50), "grep pattern too complex: its program is over 1000 instructions"},
	} {
		start := time.Now()
		_, err := b.fetch(t, b.base+"/page", batchsift.Fields{Grep: c.pattern})
		b.wantErr(t, err, b.base+"/page", batch.OutcomeUnsupported, "unsupported: "+c.reason)
		t.Logf("%s: refused after %s", c.name, time.Since(start).Round(time.Microsecond))

		err = b.f.CheckTarget(t.Context(), batch.Caller{Name: "test"}, batch.Target{URL: b.base + "/page", Options: batchsift.Fields{Grep: c.pattern}.JSON()})
		if err == nil || err.Error() != c.reason {
			t.Errorf("%s: CheckTarget = %v, want %q", c.name, err, c.reason)
		}
		if he, ok := errors.AsType[batch.HintError](err); !ok || he.Hint() == "" {
			t.Errorf("%s: CheckTarget's error has no hint", c.name)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the page was fetched %d times; a refused pattern fetches nothing", n)
	}
	for _, opts := range []batchsift.Fields{{}, {Grep: heavyPattern}, {Grep: "f(x"}, {Mode: batchsift.ModeDigest}} {
		if err := b.f.CheckTarget(t.Context(), batch.Caller{Name: "test"}, opts.Target(b.base+"/page")); err != nil {
			t.Errorf("CheckTarget(%+v) = %v, want nil", opts, err)
		}
	}
}
