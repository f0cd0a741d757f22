package batchnet

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siftfetch/batchkit/batch"
)

// TestClient_Do checks the error of each way a fetch through the client
// can fail: its fixed message, its outcome, and that it leaks nothing of
// the URL.
func TestClient_Do(t *testing.T) {
	t.Parallel()

	t.Run("BodyCutShort", func(t *testing.T) {
		t.Parallel()
		// Headers that promise more body than comes before the close.
		addr := rawServer(t, []byte("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b"))
		b := setup(t, nil, addr)
		u := "http://" + addr + "/c-short?token=c-tok"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUpstream5xx, "fetch: connection closed by upstream")
		var fe *FetchError
		if !errors.As(err, &fe) {
			t.Errorf("body read error = %T, want *FetchError", err)
		}
	})

	t.Run("BodyDeadline", func(t *testing.T) {
		t.Parallel()
		// Timeout bounds the body too, not only the wait for headers.
		b := setup(t, func(o *ClientConfig) { o.Timeout = 150 * time.Millisecond })
		b.mux.HandleFunc("/trickle", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "start")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		})
		u := b.base + "/trickle"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeTimeout, "timeout: no response before the deadline")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
	})

	t.Run("Cancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		ctx, cancel := context.WithCancel(t.Context())
		b.mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
			cancel() // the fetch's context ends while the request is in flight
			<-r.Context().Done()
		})
		u := b.base + "/hang"
		_, err := b.getCtx(ctx, t, u)
		b.wantErr(t, err, u, batch.OutcomeCancel, "fetch: cancelled")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("errors.Is(%v, Canceled) = false", err)
		}
	})

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := ln.Addr().String()
		ln.Close()
		b := setup(t, nil, closed)
		u := "http://" + closed + "/c-refused"
		_, err = b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUpstream5xx, "connect: connection refused")
	})

	t.Run("ConnectionReset", func(t *testing.T) {
		t.Parallel()
		addr := rawServer(t, nil) // reads the request, closes without answering
		b := setup(t, nil, addr)
		u := "http://" + addr + "/c-reset"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUpstream5xx, "fetch: connection closed by upstream")
	})

	t.Run("DNSNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		u := "http://c-nxdomain-3f9a.test/x"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUpstream4xx, "dns: host not found")
	})

	t.Run("DNSNoAnswers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.dns.set("c-empty.test")
		u := "http://c-empty.test/x"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUpstream4xx, "dns: host not found")
	})

	t.Run("DNSFailures", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			err     error
			outcome batch.Outcome
			msg     string
		}{
			{&net.DNSError{Err: "i/o timeout", Name: "c-dns.test", Server: "10.9.8.7:53", IsTimeout: true}, batch.OutcomeTimeout, "dns: lookup timed out"},
			{&net.DNSError{Err: "server misbehaving", Name: "c-dns.test", Server: "10.9.8.7:53", IsTemporary: true}, batch.OutcomeUpstream5xx, "dns: lookup failed"},
			{errors.New("lookup c-dns.test: odd failure"), batch.OutcomeUpstream5xx, "dns: lookup failed"},
		} {
			b := setup(t, func(o *ClientConfig) {
				o.Lookup = func(context.Context, string) ([]netip.Addr, error) { return nil, tc.err }
			})
			u := "http://c-dns.test/x"
			_, err := b.get(t, u)
			b.wantErr(t, err, u, tc.outcome, tc.msg)
			assertNoLeak(t, err, "10.9.8.7")
		}
	})

	t.Run("HeaderTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *ClientConfig) { o.HeaderTimeout, o.Timeout = 100*time.Millisecond, 10*time.Second })
		stall := make(chan struct{})
		t.Cleanup(func() { close(stall) }) // before the server's Close, which waits for the handler
		b.mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) { <-stall })
		u := b.base + "/stall"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeTimeout, "timeout: upstream sent no response headers in time")
		if errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) = true, want false: the fetch's own deadline did not pass", err)
		}
	})

	t.Run("Redirects", func(t *testing.T) {
		t.Parallel()
		for _, limit := range []int{0, 1} { // 0: DefaultMaxRedirects
			b := setup(t, func(o *ClientConfig) { o.MaxRedirects = limit })
			b.mux.HandleFunc("/hop/{n}", func(w http.ResponseWriter, r *http.Request) {
				n, _ := strconv.Atoi(r.PathValue("n"))
				if n == 0 {
					fmt.Fprint(w, "arrived")
					return
				}
				http.Redirect(w, r, fmt.Sprintf("/hop/%d", n-1), http.StatusFound)
			})
			want := cmp.Or(limit, DefaultMaxRedirects)
			body, err := b.get(t, fmt.Sprintf("%s/hop/%d", b.base, want))
			if err != nil || body != "arrived" {
				t.Fatalf("%d redirects: %q, %v; want arrived", want, body, err)
			}
			u := fmt.Sprintf("%s/hop/%d", b.base, want+1)
			_, err = b.get(t, u)
			b.wantErr(t, err, u, batch.OutcomeOther, fmt.Sprintf("fetch: too many redirects (max %d)", want))
		}
	})

	t.Run("RedirectToHTTP", func(t *testing.T) {
		t.Parallel()
		// https → http is refused; https → https and
		// http → https are followed.
		var plainBase atomic.Value // the http server's base URL
		secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/down":
				http.Redirect(w, r, plainBase.Load().(string)+"/plain", http.StatusFound)
			case "/same":
				http.Redirect(w, r, "/secure", http.StatusFound)
			default:
				fmt.Fprint(w, "secure")
			}
		}))
		t.Cleanup(secure.Close)
		b := setup(t, nil, secure.Listener.Addr().String())
		plainBase.Store(b.base)
		var plain atomic.Int64
		b.mux.HandleFunc("/plain", func(w http.ResponseWriter, r *http.Request) {
			plain.Add(1)
			fmt.Fprint(w, "in the clear")
		})
		b.mux.HandleFunc("/up", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, secure.URL+"/secure", http.StatusFound)
		})
		roots := x509.NewCertPool()
		roots.AddCert(secure.Certificate())
		b.c.transport.TLSClientConfig.RootCAs = roots
		u := secure.URL + "/down"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: redirect from https to http")
		if n := plain.Load(); n != 0 {
			t.Errorf("the http page was fetched %d times", n)
		}
		if body, err := b.get(t, secure.URL+"/same"); err != nil || body != "secure" {
			t.Errorf("https → https: %q, %v", body, err)
		}
		if body, err := b.get(t, b.base+"/up"); err != nil || body != "secure" {
			t.Errorf("http → https: %q, %v", body, err)
		}
	})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(o *ClientConfig) { o.Timeout = 150 * time.Millisecond })
		b.mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		})
		u := b.base + "/slow"
		_, err := b.get(t, u) // ClientConfig.Timeout
		b.wantErr(t, err, u, batch.OutcomeTimeout, "timeout: no response before the deadline")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
		b = setup(t, nil)
		b.mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		})
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond) // the request context's own deadline
		defer cancel()
		u = b.base + "/slow"
		_, err = b.getCtx(ctx, t, u)
		b.wantErr(t, err, u, batch.OutcomeTimeout, "timeout: no response before the deadline")
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("errors.Is(%v, DeadlineExceeded) = false", err)
		}
	})

	t.Run("TLSHandshakeFailed", func(t *testing.T) {
		t.Parallel()
		addr := rawServer(t, []byte("\x00\x01\x02\x03\x04 not tls at all")) // no TLS record
		b := setup(t, nil, addr)
		u := "https://" + addr + "/c-handshake"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUnsupported, "tls: handshake failed")
	})

	t.Run("TLSPlainHTTPAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		u := "https://" + b.addr + "/c-plain"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUnsupported, "tls: handshake failed")
	})

	t.Run("TLSUntrusted", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake failure is expected
		srv.StartTLS()
		t.Cleanup(srv.Close)
		b := setup(t, nil, srv.Listener.Addr().String())
		u := srv.URL + "/c-tls"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeUnsupported, "tls: certificate verification failed")
	})

	t.Run("URLRefused", func(t *testing.T) {
		t.Parallel()
		// Do pre-checks the first URL as it does each redirect's.
		b := setup(t, nil)
		u := "http://127.0.0.1:" + b.port + "0/c-port"
		_, err := b.get(t, u)
		b.wantErr(t, err, u, batch.OutcomeBlocked, "blocked: port not allowed")
		if _, err := b.c.Do(&http.Request{Method: http.MethodGet}); err == nil || err.Error() != "blocked: unparseable url" {
			t.Errorf("Do(no URL) = %v, want blocked: unparseable url", err)
		}
		if n := b.rec.count(); n != 0 {
			t.Errorf("%d connections attempted, want 0", n)
		}
	})
}
