package fetcher

import (
	"html"
	"strings"
	"unicode"
)

// rawTextElements hold raw text up to their end tag; their content is
// dropped without parsing it as markup.
var rawTextElements = map[string]bool{
	"script": true, "style": true, "noscript": true, "iframe": true,
	"noembed": true, "noframes": true, "xmp": true,
}

// skippedElements hold markup that is not readable text; everything inside
// them is dropped.
var skippedElements = map[string]bool{
	"head": true, "template": true, "svg": true, "math": true,
	"object": true, "select": true, "canvas": true,
}

// blockElements break the line. The value is how many line breaks: 2 for
// elements that start a paragraph (a blank line), 1 for the others.
var blockElements = map[string]int{
	"p": 2, "h1": 2, "h2": 2, "h3": 2, "h4": 2, "h5": 2, "h6": 2,
	"blockquote": 2, "pre": 2, "table": 2, "ul": 2, "ol": 2, "dl": 2,
	"section": 2, "article": 2, "header": 2, "footer": 2, "nav": 2,
	"aside": 2, "main": 2, "figure": 2, "form": 2, "hr": 2,
	"div": 1, "li": 1, "tr": 1, "dt": 1, "dd": 1, "caption": 1,
	"figcaption": 1, "details": 1, "summary": 1, "address": 1,
	"body": 1, "html": 1, "legend": 1, "fieldset": 1, "hgroup": 1,
	"dialog": 1, "option": 1, "tbody": 1, "thead": 1, "tfoot": 1,
}

// ExtractText returns the readable text of an HTML document: the content
// of script, style, noscript, head and similar elements is dropped, tags
// are removed, character references are decoded, runs of white space
// collapse to one space (except inside pre), block elements start a new
// line (paragraph-like ones a new paragraph, after one blank line), and
// table cells are separated by a space. It is a small, forgiving scanner,
// not an HTML5 parser: it never fails, and on malformed markup it keeps
// what text it can.
func ExtractText(src string) string {
	lower := asciiLower(src)
	var b textBuilder
	skip, depth, pre := "", 0, 0
	text := func(s string) {
		if depth > 0 || s == "" {
			return
		}
		s = html.UnescapeString(s)
		if pre > 0 {
			b.pre(s)
		} else {
			b.text(s)
		}
	}
	i := 0
	for i < len(src) {
		lt := strings.IndexByte(src[i:], '<')
		if lt < 0 {
			text(src[i:])
			break
		}
		text(src[i : i+lt])
		i += lt
		switch rest := src[i:]; {
		case strings.HasPrefix(rest, "<!--"):
			i = skipPast(src, i+4, "-->")
			continue
		case strings.HasPrefix(rest, "<!"), strings.HasPrefix(rest, "<?"):
			i = skipPast(src, i+2, ">")
			continue
		}
		tag, n := parseTag(src[i:])
		if n == 0 {
			text("<") // not a tag: a literal "<"
			i++
			continue
		}
		i += n
		switch {
		case !tag.closing && rawTextElements[tag.name]:
			end := strings.Index(lower[i:], "</"+tag.name)
			if end < 0 {
				return b.String()
			}
			i += end
			_, n := parseTag(src[i:])
			i += max(n, 1)
		case depth > 0:
			switch {
			case tag.name == skip && tag.closing:
				depth--
			case tag.name == skip && !tag.selfClosing:
				depth++
			case skip == "head" && tag.name == "body" && !tag.closing:
				depth = 0 // <body> ends an unclosed <head>
				b.brk(1)
			}
		case !tag.closing && !tag.selfClosing && skippedElements[tag.name]:
			skip, depth = tag.name, 1
		case tag.name == "br":
			b.lineBreak()
		case tag.name == "td" || tag.name == "th":
			b.space()
		case tag.name == "pre":
			if tag.closing {
				pre = max(pre-1, 0)
			} else {
				pre++
			}
			b.brk(2)
		default:
			if n := blockElements[tag.name]; n > 0 {
				b.brk(n)
			}
		}
	}
	return b.String()
}

// skipPast returns the index just after the first sep at or after i, or
// len(s) if there is none.
func skipPast(s string, i int, sep string) int {
	if i > len(s) {
		return len(s)
	}
	j := strings.Index(s[i:], sep)
	if j < 0 {
		return len(s)
	}
	return i + j + len(sep)
}

type tag struct {
	name        string // lower case
	closing     bool   // </name>
	selfClosing bool   // <name/>
}

// parseTag parses the tag at the start of s (s[0] is '<') and returns it
// with its length; n is 0 if s does not start a tag. Quoted attribute
// values may hold '>'. A tag without its '>' runs to the end of s.
func parseTag(s string) (t tag, n int) {
	j := 1
	if j < len(s) && s[j] == '/' {
		t.closing = true
		j++
	}
	if j >= len(s) || !isASCIILetter(s[j]) {
		return tag{}, 0
	}
	start := j
	for j < len(s) && (isASCIILetter(s[j]) || s[j] >= '0' && s[j] <= '9' || s[j] == '-' || s[j] == ':') {
		j++
	}
	t.name = asciiLower(s[start:j])
	for j < len(s) {
		switch s[j] {
		case '>':
			t.selfClosing = s[j-1] == '/'
			return t, j + 1
		case '=':
			j++
			for j < len(s) && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r' || s[j] == '\f') {
				j++
			}
			if j < len(s) && (s[j] == '"' || s[j] == '\'') {
				j = skipPast(s, j+1, s[j:j+1])
			}
		default:
			j++
		}
	}
	return t, len(s)
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// asciiLower lower-cases the ASCII letters of s only, so that indexes into
// the result are indexes into s.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// textBuilder collects text, collapsing white space and pending breaks.
type textBuilder struct {
	out       strings.Builder
	lineStart bool // nothing written on the current line yet
	sp        bool // a space is pending
	breaks    int  // line breaks pending (at most 2)
}

func (b *textBuilder) flush() {
	switch {
	case b.out.Len() == 0:
	case b.breaks > 0:
		b.out.WriteString("\n\n"[:b.breaks])
		b.lineStart = true
	case b.sp && !b.lineStart:
		b.out.WriteByte(' ')
	}
	b.breaks, b.sp = 0, false
}

// text writes s with runs of white space collapsed to one space.
func (b *textBuilder) text(s string) {
	for _, r := range s {
		if unicode.IsSpace(r) {
			b.sp = true
			continue
		}
		b.flush()
		b.out.WriteRune(r)
		b.lineStart = false
	}
}

// pre writes s with its white space kept.
func (b *textBuilder) pre(s string) {
	b.flush()
	b.out.WriteString(s)
	b.lineStart = strings.HasSuffix(s, "\n")
}

func (b *textBuilder) brk(n int)  { b.breaks = max(b.breaks, n) }
func (b *textBuilder) lineBreak() { b.breaks = min(b.breaks+1, 2) }
func (b *textBuilder) space()     { b.sp = true }

// String returns the text with trailing white space trimmed from each line
// and at most one blank line in a row.
func (b *textBuilder) String() string {
	var out strings.Builder
	blank := 0
	for line := range strings.Lines(b.out.String()) {
		line = strings.TrimRightFunc(line, unicode.IsSpace)
		if line == "" {
			blank++
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n\n"[:min(blank, 1)+1])
		}
		blank = 0
		out.WriteString(line)
	}
	return out.String()
}
