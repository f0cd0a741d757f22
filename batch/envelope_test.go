package batch_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/siftfetch/batchkit/batch"
)

// jsonString is encoding/json's form of s with HTML escaping off: the
// reference the envelope's own string encoder must match byte for byte.
func jsonString(t testing.TB, s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

func checkEnvelopeContent(t *testing.T, content string) {
	t.Helper()
	env, err := batch.Result{Content: content}.Envelope()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"content":` + jsonString(t, content) + `}`; string(env) != want {
		t.Fatalf("Envelope(%q) = %s, want %s", content, env, want)
	}
	back, err := batch.DecodeEnvelope(env)
	if err != nil {
		t.Fatalf("DecodeEnvelope(%s): %v", env, err)
	}
	if utf8.ValidString(content) && back.Content != content {
		t.Fatalf("round trip of %q = %q", content, back.Content)
	}
}

func TestResult_EnvelopeEscaping(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("plain text <b>&amp;</b> ", 500)
	for _, s := range []string{
		"", "a", "quote \" and backslash \\", "\x00\x01\x1f\x7f", "\b\f\n\r\t",
		"<script>&</script>", "é ü 日本 🙂", "\u2028\u2029", "bad \xff utf8 \xc3",
		long, long + "\n" + long, "12345678\"", "1234567\\", "abcdefg\xe2\x80\xa8h",
	} {
		checkEnvelopeContent(t, s)
	}
}

func FuzzEnvelopeContent(f *testing.F) {
	for _, s := range []string{"", "hello", "a\"b\\c\n", "\xff\u2028<>&", strings.Repeat("x", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkEnvelopeContent(t, s) })
}

func BenchmarkResult_Envelope(b *testing.B) {
	for name, content := range map[string]string{
		"html":  strings.Repeat("<p>Some fetched page text.</p>\n", 330),
		"plain": strings.Repeat("x", 10<<10),
	} {
		b.Run(name, func(b *testing.B) {
			r := batch.Result{Content: content, Meta: map[string]any{"status": 200}}
			b.SetBytes(int64(len(r.Content)))
			for b.Loop() {
				if _, err := r.Envelope(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
