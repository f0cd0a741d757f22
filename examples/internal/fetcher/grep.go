package fetcher

import (
	"context"
	"errors"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
	"github.com/siftfetch/batchkit/batchnet"
)

// Limits of a Grep pattern, the defaults of [Options].MaxGrepBytes and
// [Options].MaxGrepInsts. Go's regexp runs in time linear in the input,
// but times the size of the compiled program: about 7ns per byte and
// instruction on one core, so a program of 1000 instructions takes some
// 15s over a 2 MiB body, and one of a million (a 15 KB pattern of
// alternatives of x{1000}) some four hours.
const (
	DefaultMaxGrepBytes = 1024
	DefaultMaxGrepInsts = 1000
)

// Grep windows: a line longer than GrepWindow bytes is matched in windows
// of GrepWindow bytes that overlap by GrepOverlap (each widened by up to 3
// bytes to cut at UTF-8 boundaries), so that no one match call runs for long and the context is
// checked between windows. A match of up to GrepOverlap bytes is found
// wherever it lies in the line; a longer one only within one window. At a
// window's edge, ^, $ and \b see the edge as the line's start or end.
const (
	GrepWindow  = 2 << 10
	GrepOverlap = 512
)

// grepHint is the hint of a refused pattern at submit.
const grepHint = "make the grep pattern smaller; x{n} repeats x n times in its program"

// grepper is a compiled Grep: a regular expression, or a literal substring
// when the pattern is not one.
type grepper struct {
	re  *regexp.Regexp
	lit string
}

// CheckTarget checks t's options at submit, as a batchhttp.CheckTargetFunc:
// it refuses a Grep pattern over the fetcher's limits (see
// [Options].MaxGrepBytes and [Options].MaxGrepInsts) with an error whose
// text says which limit and which carries a hint ([batch.HintError]). The
// other options are checked when the target is fetched.
func (f *Fetcher) CheckTarget(_ context.Context, _ batch.Caller, t batch.Target) error {
	opts, err := batchsift.Read(t)
	if err != nil || opts.Grep == "" {
		return nil // the runner refuses options that do not decode
	}
	_, reason := f.compileGrep(opts.Grep)
	if reason != "" {
		return batch.NewFetchError(batch.OutcomeUnsupported, grepHint, errors.New(reason))
	}
	return nil
}

// grep returns the compiled Grep of pattern, or an unsupported error for a
// pattern over the limits.
func (f *Fetcher) grep(pattern string) (*grepper, error) {
	g, reason := f.compileGrep(pattern)
	if reason != "" {
		return nil, failf(batch.OutcomeUnsupported, "unsupported: "+reason)
	}
	return g, nil
}

// compileGrep compiles pattern, or says why it is refused: longer than
// maxGrepBytes, or a program of more than maxGrepInsts instructions. The
// program is counted as regexp.Compile builds it (parse, simplify,
// compile), after an estimate from the parsed tree has ruled out a program
// so large that building it would cost time and memory. A pattern that Go
// refuses as too large or too deep is refused too; any other pattern that
// does not parse is a literal substring.
func (f *Fetcher) compileGrep(pattern string) (*grepper, string) {
	if len(pattern) > f.maxGrepBytes {
		return nil, "grep pattern too large: " + strconv.Itoa(len(pattern)) + " bytes (max " + strconv.Itoa(f.maxGrepBytes) + ")"
	}
	tooComplex := "grep pattern too complex: its program is over " + strconv.Itoa(f.maxGrepInsts) + " instructions"
	re, err := syntax.Parse(pattern, syntax.Perl) // the flags of regexp.Compile
	if se, ok := errors.AsType[*syntax.Error](err); ok && (se.Code == syntax.ErrLarge || se.Code == syntax.ErrNestingDepth) {
		return nil, tooComplex
	}
	if err != nil {
		return &grepper{lit: pattern}, ""
	}
	if progEstimate(re, 2*f.maxGrepInsts+16) > 2*f.maxGrepInsts+16 {
		return nil, tooComplex
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil || len(prog.Inst) > f.maxGrepInsts {
		return nil, tooComplex
	}
	rx, err := regexp.Compile(pattern)
	if err != nil {
		return &grepper{lit: pattern}, ""
	}
	return &grepper{re: rx}, ""
}

// progEstimate estimates the instructions of re's compiled program, close
// to what syntax.Compile of re.Simplify() makes. It stops counting once
// the count is over limit, and returns limit+1 then.
func progEstimate(re *syntax.Regexp, limit int) int {
	n := 0
	var walk func(re *syntax.Regexp, times int) bool
	add := func(k, times int) bool {
		if times > limit || k > limit {
			n = limit + 1
			return false
		}
		n += k * times
		return n <= limit
	}
	walk = func(re *syntax.Regexp, times int) bool {
		switch re.Op {
		case syntax.OpLiteral:
			return add(len(re.Rune), times)
		case syntax.OpCapture:
			return add(2, times) && walk(re.Sub[0], times)
		case syntax.OpStar, syntax.OpPlus, syntax.OpQuest:
			return add(1, times) && walk(re.Sub[0], times)
		case syntax.OpConcat, syntax.OpAlternate:
			if !add(max(len(re.Sub)-1, 0), times) {
				return false
			}
			for _, sub := range re.Sub {
				if !walk(sub, times) {
					return false
				}
			}
			return true
		case syntax.OpRepeat:
			// x{n,m}: n copies of x, then m-n optional ones; x{n,}: n
			// copies, the last one starred.
			copies := max(re.Min, re.Max, 1)
			if !add(max(re.Max-re.Min, 0)+1, times) {
				return false
			}
			if copies > limit || times*copies > limit {
				n = limit + 1
				return false
			}
			return walk(re.Sub[0], times*copies)
		default: // a class, any char, an empty-width assertion, empty or no match
			return add(1, times)
		}
	}
	walk(re, 1)
	return min(n+2, limit+1) // the fail and match instructions
}

// grepLines keeps the lines of text that g matches, and returns them
// joined by newlines with how many there were. It checks ctx before each
// line and each window of a long line (see [GrepWindow]), and returns a
// timeout error (outcome timeout, matching context.DeadlineExceeded) once
// ctx's deadline has passed, or a cancel error once ctx is cancelled.
func grepLines(ctx context.Context, text string, g *grepper) (string, int, error) {
	var b strings.Builder
	n := 0
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		ok, err := g.match(ctx, line)
		if err != nil {
			return "", 0, err
		}
		if !ok {
			continue
		}
		if n > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(line)
		n++
	}
	return b.String(), n, nil
}

// match reports whether line matches, checking ctx before each window.
func (g *grepper) match(ctx context.Context, line string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, grepStopped(ctx)
	}
	if g.re == nil {
		return strings.Contains(line, g.lit), nil // linear in the line, whatever the pattern
	}
	if len(line) <= GrepWindow {
		return g.re.MatchString(line), nil
	}
	for start := 0; ; start += GrepWindow - GrepOverlap {
		// Cut at rune starts, widening the window: start back, end on.
		for start > 0 && !utf8.RuneStart(line[start]) {
			start--
		}
		end := min(start+GrepWindow, len(line))
		for end < len(line) && !utf8.RuneStart(line[end]) {
			end++
		}
		if start > 0 {
			if err := ctx.Err(); err != nil {
				return false, grepStopped(ctx)
			}
		}
		if g.re.MatchString(line[start:end]) {
			return true, nil
		}
		if end == len(line) {
			return false, nil
		}
	}
}

// grepDeadline is the error of a grep that the fetch's deadline ended.
type grepDeadline struct{}

func (grepDeadline) Error() string { return "timeout: grep did not finish before the deadline" }
func (grepDeadline) Unwrap() error { return context.DeadlineExceeded }

// grepStopped is the error of a grep that ctx ended.
func grepStopped(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return batch.NewFetchError(batch.OutcomeTimeout, "", grepDeadline{})
	}
	return batchnet.CleanError(ctx, ctx.Err()) // "fetch: cancelled"
}
