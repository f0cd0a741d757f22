package batchrobots

import (
	"bytes"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/temoto/robotstxt"
)

// otherAgent replaces the user-agent of every group that is neither ours
// nor "*". It holds a dot, which no product token does, so it is a prefix
// of none: robotstxt picks the group whose agent is the longest prefix of
// ours, which would let a group "batch" rule an agent "batchkit".
const otherAgent = "other.agent"

// maxDelaySeconds bounds a Crawl-delay before it becomes a Duration, whose
// conversion from a larger float is undefined.
const maxDelaySeconds = 24 * 60 * 60

// lenient rewrites a robots.txt so that robotstxt keeps every rule it can
// read, as RFC 9309 asks: robotstxt refuses the whole file for one bad
// line (a Crawl-delay that is not a number, a rule before any
// User-agent). It drops those lines, and renames each group's user-agent
// to agent (the lower-case product token) when its product token matches,
// and to otherAgent when it is not "*".
func lenient(body []byte, agent string) []byte {
	var out bytes.Buffer
	out.Grow(len(body))
	inGroup := false
	for _, line := range strings.FieldsFunc(string(body), func(r rune) bool { return r == '\n' || r == '\r' }) {
		key, value, ok := splitLine(line)
		switch {
		case !ok:
		case key == "user-agent" || key == "useragent":
			inGroup = true
			switch {
			case value == "*":
			case strings.EqualFold(productToken(value), agent):
				value = agent
			default:
				value = otherAgent
			}
			line = "user-agent: " + value
		case key == "allow" || key == "disallow":
			if !inGroup {
				continue
			}
			line = key + ": " + value
		case key == "crawl-delay" || key == "crawldelay":
			v, err := strconv.ParseFloat(value, 64)
			if !inGroup || err != nil || v < 0 || math.IsNaN(v) {
				continue
			}
			line = "crawl-delay: " + strconv.FormatFloat(min(v, maxDelaySeconds), 'f', -1, 64)
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// splitLine returns the lower-case key of a robots.txt line and its
// value, without the comment. The key ends at a colon or a space, as
// robotstxt's scanner has it ("User-agent *" is a user-agent line). ok is
// false for a line without a value.
func splitLine(line string) (key, value string, ok bool) {
	content, _, _ := strings.Cut(line, "#")
	content = strings.TrimSpace(content)
	i := strings.IndexAny(content, ": \t\v")
	if i < 0 {
		return "", "", false
	}
	value = strings.TrimSpace(content[i:])
	value = strings.TrimSpace(strings.TrimPrefix(value, ":"))
	return strings.ToLower(content[:i]), value, true
}

// productToken returns the leading letters, '_' and '-' of a user-agent
// value: "batchkit" of "batchkit/1.0".
func productToken(s string) string {
	end := strings.IndexFunc(s, func(r rune) bool { return !isTokenRune(r) })
	if end < 0 {
		return s
	}
	return s[:end]
}

func isTokenRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || r == '_' || r == '-'
}

// parse returns the group of body's rules that applies to agent, or nil
// for none (everything allowed), and the group's crawl delay.
func parse(body []byte, agent string) (*robotstxt.Group, time.Duration, error) {
	data, err := robotstxt.FromBytes(lenient(body, agent))
	if err != nil {
		return nil, 0, err
	}
	g := data.FindGroup(agent)
	return g, max(g.CrawlDelay, 0), nil
}

// truncate cuts body to at most n bytes, and then to its last whole line,
// so that a rule cut in two is not read as a shorter one.
func truncate(body []byte, n int64) []byte {
	if int64(len(body)) <= n {
		return body
	}
	body = body[:n]
	if i := bytes.LastIndexAny(body, "\r\n"); i >= 0 {
		return body[:i+1]
	}
	return body[:0]
}
