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
		content, _, _ := strings.Cut(line, "#")
		key, value, ok := strings.Cut(content, ":")
		key, value = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(value)
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
