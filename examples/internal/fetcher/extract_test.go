package fetcher

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestExtractText(t *testing.T) {
	t.Parallel()

	f := func(src, want string) {
		t.Helper()
		if got := ExtractText(src); got != want {
			t.Errorf("ExtractText(%q)\n got %q\nwant %q", src, got, want)
		}
	}

	f("", "")
	f("plain text", "plain text")
	f("  a \n\t b  ", "a b")
	f("<p>one</p><p>two</p>", "one\n\ntwo")
	f("<div>one</div><div>two</div>", "one\ntwo")
	f("a<br>b<br/>c<br><br>d", "a\nb\nc\n\nd")
	f("<b>bold</b> and <i>it</i>alic", "bold and italic")
	f("<ul><li>x</li><li>y</li></ul>after", "x\ny\n\nafter")
	f("<table><tr><td>a</td><td>b</td></tr><tr><th>c</th><td>d</td></tr></table>", "a b\nc d")
	f("x &amp; y &lt;z&gt; &#39;q&#x27; &nbsp;&copy;", "x & y <z> 'q' ©")
	f("a < b and c<3", "a < b and c<3")
	f("<!-- hidden --> shown <!-- unterminated", "shown")
	f("<!DOCTYPE html><?xml version='1.0'?>text", "text")
	f("<![CDATA[x]]>y", "y") // skipped to the first ">"
	f("<head><title>T</title><meta charset=utf-8></head><body>B</body>", "B")
	f("<head><title>T</title><body>no closing head</body>", "no closing head")
	f("<html><head><link rel=x></head>text", "text")
	f("<script>if (a < b && c > d) { x = '</div>' }</script>after", "after")
	f("<SCRIPT type=text/javascript>alert(1)</SCRIPT >after", "after")
	f("<style>p > a { }</style>after", "after")
	f("<noscript><p>enable js</p></noscript>after", "after")
	f("<script>never closed", "")
	f("<template><p>tpl</p><template>inner</template>still</template>shown", "shown")
	f("<svg><text>drawn</text><svg><g/></svg>x</svg>shown", "shown")
	f("<svg/>shown", "shown")
	f("<select><option>a</option><option>b</option></select>after", "after")
	f(`<a href="x>y" title='p>q' data-x=a>link</a>`, "link")
	f(`<a href = "x>y">link</a>`, "link")
	f(`<a href=x'y>link</a>`, "link")
	f("<img alt=x src=y>text", "text")
	f("<p>unclosed <a href='", "unclosed")
	f("<pre>  keep\n    indent\n\n\nhere </pre>after", "  keep\n    indent\n\nhere\n\nafter")
	f("<h1>T</h1>\n\n\n<p>   </p><p>x</p>", "T\n\nx")
	f("<custom-el>c</custom-el><x:y>ns</x:y>", "cns")
	f("日本語 <p>текст</p>", "日本語\n\nтекст")
	f("<p>İstanbul <SCRIPT>x</SCRIPT>ok</p>", "İstanbul ok")
	f("\xff\xfe<SCRIPT>\xff\xff</SCRIPT>after", "\uFFFD\uFFFDafter") // invalid UTF-8 keeps indexes aligned
}

func FuzzExtractText(f *testing.F) {
	for _, s := range []string{page, "<a href='>", "<script>", "<!--", "<pre>\n</pre>", "&#x110000;", "<\xff>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		out := ExtractText(src)
		if utf8.ValidString(src) && !utf8.ValidString(out) {
			t.Errorf("ExtractText(%q) = %q: invalid UTF-8", src, out)
		}
		if strings.Contains(out, "\n\n\n") {
			t.Errorf("ExtractText(%q) = %q: more than one blank line", src, out)
		}
	})
}

func TestGrepLines(t *testing.T) {
	t.Parallel()

	f := func(text, pattern, want string, wantN int) {
		t.Helper()
		g, reason := New(Options{}).compileGrep(pattern)
		if reason != "" {
			t.Fatalf("compileGrep(%q): %s", pattern, reason)
		}
		got, n, err := grepLines(t.Context(), text, g)
		if err != nil || got != want || n != wantN {
			t.Errorf("grep(%q, %q) = %q, %d, %v; want %q, %d", text, pattern, got, n, err, want, wantN)
		}
	}

	f("a\nb\nab\n", "a", "a\nab", 2)
	f("a\r\nb\r\n", "b", "b", 1)
	f("x1\nx22\nx\n", `x\d+`, "x1\nx22", 2)
	f("Go\ngo\n", "(?i)GO", "Go\ngo", 2)
	f("a.b\naxb\n", "a.b", "a.b\naxb", 2) // a regexp when it compiles
	f("f(x\nfx\n", "f(x", "f(x", 1)       // a substring when it does not
	f("[\n]\n", "[", "[", 1)
	f("none\n", "zzz", "", 0)
	f("", "a", "", 0)
}

func TestDecodeText(t *testing.T) {
	t.Parallel()

	f := func(body, charset, want string) {
		t.Helper()
		if got := decodeText([]byte(body), charset); got != want {
			t.Errorf("decodeText(%q, %q) = %q, want %q", body, charset, got, want)
		}
	}

	f("héllo", "", "héllo")
	f("\uFEFFbom", "utf-8", "bom")
	f("bad\xffbyte", "utf-8", "bad\uFFFDbyte")
	f("caf\xe9", "iso-8859-1", "café")
	f("caf\xe9", "windows-1252", "café")
	f("caf\xe9", "shift_jis", "caf\uFFFD")
}

func TestContentTypes(t *testing.T) {
	t.Parallel()

	f := func(header, wantMedia, wantCharset string, wantDeclared, wantText bool) {
		t.Helper()
		ct := parseContentType(header)
		if ct.media != wantMedia || ct.charset != wantCharset || ct.declared != wantDeclared || isText(ct.media) != wantText {
			t.Errorf("parseContentType(%q) = %+v, text %t", header, ct, isText(ct.media))
		}
	}

	f("text/html; charset=UTF-8", "text/html", "utf-8", true, true)
	f("TEXT/Plain", "text/plain", "", true, true)
	f("application/json", "application/json", "", true, true)
	f("application/ld+json", "application/ld+json", "", true, true)
	f("application/atom+xml; charset=iso-8859-1", "application/atom+xml", "iso-8859-1", true, true)
	f("image/png", "image/png", "", true, false)
	f("application/octet-stream", "application/octet-stream", "", true, false)
	f("application/pdf", "application/pdf", "", true, false)
	f("", "", "", false, false)
	f("garbage;;=", "", "", false, false)
}
