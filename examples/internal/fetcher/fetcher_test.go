package fetcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batch/batchsift"
)

const page = `<!doctype html><html><head><title>Title</title><style>p{color:red}</style>
<script>var secret = "</p>";</script></head>
<body><h1>Hello  &amp; welcome</h1><p>First line
wraps here.</p><noscript>enable js</noscript><ul><li>alpha</li><li>beta</li></ul>
<p>Last&nbsp;word.</p></body></html>`

const pageText = "Hello & welcome\n\nFirst line wraps here.\n\nalpha\nbeta\n\nLast word."

func TestFetcher_Fetch(t *testing.T) {
	t.Parallel()

	servePage := func(b *testBundle) {
		b.mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, page)
		})
	}

	t.Run("BinaryContentType", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.mux.HandleFunc("/img", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "image/png")
			w.Write([]byte("\x89PNG\r\n\x1a\n"))
		})
		u := b.base + "/img"
		_, err := b.fetch(t, u, batchsift.Fields{})
		b.wantErr(t, err, u, batch.OutcomeUnsupported, "unsupported: content type image/png")
	})

	t.Run("Clean", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		servePage(b)
		res, err := b.fetch(t, b.base+"/page", batchsift.Fields{Mode: batchsift.ModeClean})
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != pageText {
			t.Errorf("content = %q, want %q", res.Content, pageText)
		}
		if res.Meta["mode"] != "clean" {
			t.Errorf("mode = %v, want clean", res.Meta["mode"])
		}
	})

	t.Run("CleanPlainText", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.mux.HandleFunc("/txt", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "<b>not html</b>\n  kept  as is\n")
		})
		res, err := b.fetch(t, b.base+"/txt", batchsift.Fields{Mode: batchsift.ModeClean})
		if err != nil {
			t.Fatal(err)
		}
		if want := "<b>not html</b>\n  kept  as is\n"; res.Content != want {
			t.Errorf("content = %q, want %q", res.Content, want)
		}
	})

	t.Run("Grep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		servePage(b)
		res, err := b.fetch(t, b.base+"/page", batchsift.Fields{Mode: batchsift.ModeClean, Grep: `^(alpha|Last)`})
		if err != nil {
			t.Fatal(err)
		}
		if want := "alpha\nLast word."; res.Content != want {
			t.Errorf("content = %q, want %q", res.Content, want)
		}
		if res.Meta["matches"] != 2 {
			t.Errorf("matches = %v, want 2", res.Meta["matches"])
		}
	})

	t.Run("GrepRaw", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		servePage(b)
		res, err := b.fetch(t, b.base+"/page", batchsift.Fields{Grep: "<li>"})
		if err != nil {
			t.Fatal(err)
		}
		if want := "wraps here.</p><noscript>enable js</noscript><ul><li>alpha</li><li>beta</li></ul>"; res.Content != want {
			t.Errorf("content = %q, want %q", res.Content, want)
		}
	})

	t.Run("GrepSubstring", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.mux.HandleFunc("/txt", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "f(x) = 1\nf x = 2\nf(y) = 3\r\n")
		})
		// "f(x" does not compile as a regular expression: a literal substring.
		res, err := b.fetch(t, b.base+"/txt", batchsift.Fields{Grep: "f(x"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != "f(x) = 1" || res.Meta["matches"] != 1 {
			t.Errorf("content = %q, matches = %v, want %q, 1", res.Content, res.Meta["matches"], "f(x) = 1")
		}
	})

	t.Run("Meta", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		servePage(b)
		u := b.base + "/page?token=c-meta-token"
		res, err := b.fetch(t, u, batchsift.Fields{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Meta["status"] != 200 || res.Meta["content_type"] != "text/html" ||
			res.Meta["bytes"] != len(page) || res.Meta["mode"] != "raw" {
			t.Errorf("meta = %v", res.Meta)
		}
		if _, ok := res.Meta["elapsed_ms"].(int64); !ok {
			t.Errorf("meta elapsed_ms = %T, want int64", res.Meta["elapsed_ms"])
		}
		env, err := json.Marshal(res.Meta)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range b.secrets(u) {
			if strings.Contains(string(env), s) {
				t.Errorf("meta %s contains %q", env, s)
			}
		}
	})

	t.Run("Raw", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		servePage(b)
		for _, mode := range []string{batchsift.ModeDefault, batchsift.ModeRaw} {
			res, err := b.fetch(t, b.base+"/page", batchsift.Fields{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			if res.Content != page {
				t.Errorf("mode %q: content = %q, want the page as is", mode, res.Content)
			}
		}
	})

	t.Run("SniffedBinary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.mux.HandleFunc("/bin", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil // no header, and no sniffing by the server
			w.Write([]byte{0, 1, 2, 3, 0xff, 0xfe, 0})
		})
		u := b.base + "/bin"
		_, err := b.fetch(t, u, batchsift.Fields{})
		b.wantErr(t, err, u, batch.OutcomeUnsupported, "unsupported: content type application/octet-stream")
	})

	t.Run("SniffedText", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.mux.HandleFunc("/html", func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			fmt.Fprint(w, "<html><body><p>sniffed</p></body></html>")
		})
		res, err := b.fetch(t, b.base+"/html", batchsift.Fields{Mode: batchsift.ModeClean})
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != "sniffed" || res.Meta["content_type"] != "text/html" {
			t.Errorf("content = %q, type = %v; want sniffed, text/html", res.Content, res.Meta["content_type"])
		}
	})

	t.Run("Status", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
			var code int
			fmt.Sscan(r.PathValue("code"), &code)
			w.WriteHeader(code)
			fmt.Fprint(w, "upstream body")
		})
		for _, tc := range []struct {
			code    int
			outcome batch.Outcome
		}{
			{404, batch.OutcomeUpstream4xx},
			{403, batch.OutcomeUpstream4xx},
			{429, batch.OutcomeUpstream4xx},
			{500, batch.OutcomeUpstream5xx},
			{502, batch.OutcomeUpstream5xx},
			{503, batch.OutcomeUpstream5xx},
			{304, batch.OutcomeOther},
		} {
			u := fmt.Sprintf("%s/status/%d", b.base, tc.code)
			_, err := b.fetch(t, u, batchsift.Fields{})
			b.wantErr(t, err, u, tc.outcome, fmt.Sprintf("upstream: status %d", tc.code))
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *Options) { o.Timeout = 150 * time.Millisecond })
		b.mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		})
		u := b.base + "/slow"
		_, err := b.fetch(t, u, batchsift.Fields{}) // Options.Timeout
		b.wantErr(t, err, u, batch.OutcomeTimeout, "timeout: no response before the deadline")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond) // the runner's deadline
		defer cancel()
		_, err = b.f.Fetch(ctx, batch.Caller{}, batch.Target{URL: u})
		b.wantErr(t, err, u, batch.OutcomeTimeout, "timeout: no response before the deadline")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *Options) { o.MaxBytes = 1000 })
		b.mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "1001")
			w.Write([]byte(strings.Repeat("x", 1001)))
		})
		b.mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			for range 10 {
				w.Write([]byte(strings.Repeat("y", 200)))
				w.(http.Flusher).Flush()
			}
		})
		b.mux.HandleFunc("/exact", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Write([]byte(strings.Repeat("z", 1000)))
		})
		for _, path := range []string{"/big", "/chunked"} {
			u := b.base + path
			_, err := b.fetch(t, u, batchsift.Fields{})
			b.wantErr(t, err, u, batch.OutcomeTooLong, "too long: response body exceeds 1000 bytes")
		}
		if res, err := b.fetch(t, b.base+"/exact", batchsift.Fields{}); err != nil || len(res.Content) != 1000 {
			t.Errorf("exactly MaxBytes: %d bytes, %v; want 1000 bytes", len(res.Content), err)
		}
	})

	t.Run("Unsupported", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		for _, tc := range []struct {
			opts batchsift.Fields
			msg  string
		}{
			{batchsift.Fields{Mode: batchsift.ModeDigest}, "unsupported: digest mode is not available in this fetcher"},
			{batchsift.Fields{Question: "why?"}, "unsupported: question is not available in this fetcher"},
			{batchsift.Fields{JQ: ".a"}, "unsupported: jq is not available in this fetcher"},
			{batchsift.Fields{Pages: "1-2"}, "unsupported: pages is not available in this fetcher"},
			{batchsift.Fields{Mode: "fancy"}, "unsupported: unknown mode"},
		} {
			u := b.base + "/page"
			_, err := b.fetch(t, u, tc.opts)
			b.wantErr(t, err, u, batch.OutcomeUnsupported, tc.msg)
		}
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections for unsupported options, want 0", n)
		}
	})
}

func TestNew_Defaults(t *testing.T) {
	t.Parallel()

	// The client's own defaults are batchnet's to test; a negative value
	// here is the default rather than NewClient's error.
	f := New(Options{MaxBytes: -1, Timeout: -time.Second, HeaderTimeout: -time.Second})
	t.Cleanup(f.CloseIdleConnections)
	if f.maxBytes != DefaultMaxBytes || f.userAgent != DefaultUserAgent {
		t.Errorf("defaults = %d, %q", f.maxBytes, f.userAgent)
	}
	if c := f.Client(); c == nil || c.CheckRedirect == nil || c.Jar != nil {
		t.Error("Client() is nil, has no redirect check or has a cookie jar")
	}
}
