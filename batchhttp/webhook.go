package batchhttp

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// Webhooks, as the Standard Webhooks specification (standardwebhooks.com)
// has them: a submit names a webhook, and when the job finishes the
// runner's Config.Deliver, a [WebhookSender], POSTs it a signed
// [WebhookPayload]; with per-target events, a [WebhookTargetPayload] as
// its targets finish, before that.

// Webhook is a job's webhook on the wire: {"url": "https://…"} in a submit
// and, for the job's owner, in its status. Events, if given, are the event
// types it receives (see batch.SubmitOptions): batch.target.finished and
// batch.finished; without it, batch.finished alone.
type Webhook struct {
	URL    string   `json:"url"`
	Events []string `json:"events,omitempty"`
}

// WebhookPayload is the body a webhook receives, the event envelope of the
// Standard Webhooks specification: its type, a timestamp (when the job
// finished) and the data. It is the same on every attempt.
type WebhookPayload struct {
	Type      string      `json:"type"` // batch.EventJobFinished
	Timestamp time.Time   `json:"timestamp"`
	Data      WebhookData `json:"data"`
}

// WebhookData is the data of a batch.finished event: the job's final
// status and counts, never a target URL.
type WebhookData struct {
	JobID         string          `json:"job_id"`
	Status        batch.JobStatus `json:"status"`
	Error         string          `json:"error,omitempty"`
	TargetsTotal  int             `json:"targets_total"`
	TargetsDone   int             `json:"targets_done"`
	TargetsOK     int             `json:"targets_ok"`
	TargetsFailed int             `json:"targets_failed"`
	CreatedAt     time.Time       `json:"created_at"`
	FinishedAt    time.Time       `json:"finished_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	// Deadline is the job's deadline, if it had one; a job it ended has
	// error "deadline".
	Deadline *time.Time `json:"deadline,omitempty"`
	// Metadata is the job's metadata, if it has any: the caller's labels,
	// for its receiver to route the event by.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// WebhookTargetPayload is the body of a batch.target.finished event: its
// type, a timestamp (when its first target was stored) and the data. It is
// the same on every attempt.
type WebhookTargetPayload struct {
	Type      string            `json:"type"` // batch.EventTargetFinished
	Timestamp time.Time         `json:"timestamp"`
	Data      WebhookTargetData `json:"data"`
}

// WebhookTargetData is the data of a batch.target.finished event: the job
// and one or more of its targets that finished, in idx order. It never
// carries a target URL or result: a receiver reads a result with GET
// /v1/batch/{id}/{idx}.
type WebhookTargetData struct {
	JobID        string          `json:"job_id"`
	TargetsTotal int             `json:"targets_total"`
	Targets      []WebhookTarget `json:"targets"`
	CreatedAt    time.Time       `json:"created_at"`
	// Metadata is the job's metadata, if it has any.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// WebhookTarget is one finished target in a [WebhookTargetData].
type WebhookTarget struct {
	Idx int `json:"idx"`
	// CustomID is the caller's id of the target, if it has one.
	CustomID string             `json:"custom_id,omitempty"`
	Status   batch.TargetStatus `json:"status"`  // done or failed
	Outcome  batch.Outcome      `json:"outcome"` // as in [TargetStatus]
}

// The Standard Webhooks headers of a delivery.
const (
	// HeaderWebhookID is the event's id, "msg_" and the job id (and, for
	// a batch.target.finished event, "_t" and its first target's idx):
	// the same on every attempt, node and build.
	HeaderWebhookID = "webhook-id"
	// HeaderWebhookTimestamp is the attempt's time, in Unix seconds.
	HeaderWebhookTimestamp = "webhook-timestamp"
	// HeaderWebhookSignature is "v1," and the base64 HMAC-SHA256 of
	// "<id>.<timestamp>.<body>" under the secret; a receiver accepts any of
	// several space-separated signatures (during a secret's rotation, or
	// an upgrade's transition: see [WebhookLegacySignature]).
	HeaderWebhookSignature = "webhook-signature"
)

// WebhookTolerance is how far a delivery's timestamp may be from the
// receiver's clock for [VerifyWebhook], as the specification advises.
const WebhookTolerance = 5 * time.Minute

// secretPrefix marks a Standard Webhooks secret.
const secretPrefix = "whsec_"

// Secret sizes the specification asks for: 24 to 64 random bytes.
const (
	minSecretBytes = 24
	maxSecretBytes = 64
)

// NewWebhookSecret returns a new secret of 32 random bytes in the form the
// specification gives secrets: "whsec_" and their standard base64.
func NewWebhookSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("batchhttp: webhook secret: %w", err)
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// webhookKey decodes a secret: "whsec_" (optional) and the standard base64
// of 24 to 64 bytes. Its errors never repeat the secret.
func webhookKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	switch {
	case err != nil:
		return nil, errors.New("batchhttp: webhook secret must be whsec_ and standard base64")
	case len(key) < minSecretBytes || len(key) > maxSecretBytes:
		return nil, fmt.Errorf("batchhttp: webhook secret must hold %d to %d bytes, it holds %d", minSecretBytes, maxSecretBytes, len(key))
	}
	return key, nil
}

// callerSecretLabel starts the message that derives a caller's secret
// from the master secret (see [CallerWebhookSecret]); the version lets a
// later derivation differ.
const callerSecretLabel = "batchkit webhook v1\x00"

// callerKey derives a caller's signing key from the master key:
// HMAC-SHA256(master, "batchkit webhook v1\x00" + caller).
func callerKey(master []byte, caller string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte(callerSecretLabel))
	m.Write([]byte(caller))
	return m.Sum(nil)
}

// CallerWebhookSecret returns the secret that signs the webhook deliveries
// of caller's jobs under the deployment's master secret (see
// [NewWebhookSender]): "whsec_" and the standard base64 of
// HMAC-SHA256(master key, "batchkit webhook v1\x00" + caller), 32 bytes, a
// Standard Webhooks secret that any of its libraries verifies with. Each
// caller's is its own: knowing one caller's secret tells nothing of
// another's or of the master, so no caller can sign a delivery another
// caller's receiver accepts. An operator gives each caller its secret (batchd
// prints one with -print-webhook-secret); it stays the same while the master
// does. Its errors never repeat the master secret.
func CallerWebhookSecret(master, caller string) (string, error) {
	key, err := webhookKey(master)
	if err != nil {
		return "", err
	}
	if caller == "" {
		return "", errors.New("batchhttp: webhook secret: no caller name")
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(callerKey(key, caller)), nil
}

// sign returns the v1 signature of a delivery.
func sign(key []byte, id string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// SignWebhook returns the webhook-signature header of a delivery of body
// with the given id at ts (Unix seconds) under secret.
func SignWebhook(secret, id string, ts int64, body []byte) (string, error) {
	key, err := webhookKey(secret)
	if err != nil {
		return "", err
	}
	return sign(key, id, ts, body), nil
}

// ErrWebhookSignature: a delivery whose headers or signature do not verify.
var ErrWebhookSignature = errors.New("batchhttp: webhook signature does not verify")

// VerifyWebhook checks a received delivery, as a Go receiver would: the
// three headers are present, the timestamp is within [WebhookTolerance] of
// now, and one of the v1 signatures is body's under secret. It returns
// [ErrWebhookSignature] (wrapped, with the reason) if not.
func VerifyWebhook(secret string, h http.Header, body []byte, now time.Time) error {
	key, err := webhookKey(secret)
	if err != nil {
		return err
	}
	id, tsText, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || tsText == "" || sigs == "" {
		return fmt.Errorf("%w: missing headers", ErrWebhookSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad timestamp", ErrWebhookSignature)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return fmt.Errorf("%w: timestamp off by %s", ErrWebhookSignature, d.Round(time.Second))
	}
	want := []byte(sign(key, id, ts, body))
	for _, s := range strings.Fields(sigs) {
		if subtle.ConstantTimeCompare([]byte(s), want) == 1 {
			return nil
		}
	}
	return fmt.Errorf("%w: no matching signature", ErrWebhookSignature)
}

// WebhookSender delivers webhook events as the Standard Webhooks
// specification says: a POST of the JSON [WebhookPayload] with the
// webhook-id, webhook-timestamp and webhook-signature headers, signed with
// the secret of the event's caller, which [CallerWebhookSecret] derives
// from the deployment's master secret (and [WebhookSender.CallerSecret]
// returns): every caller verifies its own deliveries with a secret no
// other caller holds. Its Deliver method is a batch.DeliverFunc:
//
//	sender, err := batchhttp.NewWebhookSender(guardedClient, secret)
//	runner, err := batch.New(batch.Config{…, Deliver: sender.Deliver})
//
// It does not follow redirects: a 3xx answer is a failed attempt, like any
// answer but a 2xx. Its errors never hold the URL, its host or an address.
type WebhookSender struct {
	client    *http.Client
	key       []byte // the master key; each event is signed with its caller's (callerKey)
	legacy    []byte // a second signing key during an upgrade (see WebhookLegacySignature), or nil
	now       func() time.Time
	userAgent string
}

// WebhookOption is an optional setting of [NewWebhookSender].
type WebhookOption func(*webhookOptions)

// webhookOptions are the settings WebhookOptions set.
type webhookOptions struct {
	legacySecret string
}

// WebhookLegacySignature is the transition setting of an upgrade from a
// build that signed every delivery with the master secret itself (the
// builds before per-caller secrets). With a secret other than "", each
// delivery carries two signatures in its webhook-signature header,
// "v1,<under the caller's secret> v1,<under secret>", so that a receiver
// that still holds the secret the previous build handed out and one that
// holds its caller's secret both verify every delivery: Standard Webhooks
// receivers accept a delivery when any one of its signatures verifies.
// secret is the one the previous build signed with, usually the sender's
// own master secret. While it is on, whoever holds that secret verifies
// (and can sign) any caller's deliveries, as with the previous build: turn
// it off once every receiver verifies with its caller's secret
// (docs/upgrading.md).
func WebhookLegacySignature(secret string) WebhookOption {
	return func(o *webhookOptions) { o.legacySecret = secret }
}

// DefaultWebhookUserAgent is the User-Agent of a [WebhookSender].
const DefaultWebhookUserAgent = "batchkit-webhook/1"

// maxWebhookAnswer is how much of a receiver's answer is read (and thrown
// away), so that its connection can be reused.
const maxWebhookAnswer = 64 << 10

// NewWebhookSender returns a sender that POSTs through client and signs
// each event with its caller's secret, derived from the master secret
// ("whsec_" and the standard base64 of 24 to 64 bytes; see
// [NewWebhookSecret] and [CallerWebhookSecret]), with the options given
// ([WebhookLegacySignature]). The client decides where a connection may go: a
// host that lets callers name webhooks gives it the same guard as its
// fetcher, so that a webhook cannot reach loopback or private addresses
// (the handler's pre-check refuses them at submit, the client at connect
// time). A nil client is the HTTP client of a [batchnet.Client] with no
// allow list, so that a sender is guarded unless its host decides
// otherwise (pass http.DefaultClient for no guard). The sender uses a copy
// of the client that does not follow redirects.
func NewWebhookSender(client *http.Client, secret string, opts ...WebhookOption) (*WebhookSender, error) {
	key, err := webhookKey(secret)
	if err != nil {
		return nil, err
	}
	var o webhookOptions
	for _, opt := range opts {
		opt(&o)
	}
	var legacy []byte
	if o.legacySecret != "" {
		if legacy, err = webhookKey(o.legacySecret); err != nil {
			return nil, fmt.Errorf("%w (the legacy signature's)", err)
		}
	}
	if client == nil {
		bc, err := batchnet.NewClient(batchnet.ClientConfig{})
		if err != nil {
			return nil, err
		}
		client = bc.HTTPClient()
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &WebhookSender{client: &c, key: key, legacy: legacy, now: time.Now, userAgent: DefaultWebhookUserAgent}, nil
}

// CallerSecret returns the secret that signs the deliveries of caller's
// jobs: [CallerWebhookSecret] of the sender's master secret, or "" for an
// empty caller name.
func (s *WebhookSender) CallerSecret(caller string) string {
	if caller == "" {
		return ""
	}
	return secretPrefix + base64.StdEncoding.EncodeToString(callerKey(s.key, caller))
}

// Payload returns the body the sender POSTs for ev: the same bytes on
// every attempt. A batch.target.finished event's is a
// [WebhookTargetPayload], any other's a [WebhookPayload].
func Payload(ev batch.WebhookEvent) ([]byte, error) {
	if ev.Type == batch.EventTargetFinished {
		ts := make([]WebhookTarget, len(ev.Targets))
		for i, t := range ev.Targets {
			ts[i] = WebhookTarget{Idx: t.Idx, CustomID: t.CustomID, Status: t.Status, Outcome: t.Outcome}
		}
		return marshal(WebhookTargetPayload{
			Type: ev.Type, Timestamp: wireTime(ev.At),
			Data: WebhookTargetData{JobID: ev.JobID, TargetsTotal: ev.TargetsTotal, Targets: ts,
				CreatedAt: wireTime(ev.CreatedAt), Metadata: ev.Metadata},
		})
	}
	return marshal(WebhookPayload{
		Type:      ev.Type,
		Timestamp: wireTime(ev.FinishedAt),
		Data: WebhookData{
			JobID: ev.JobID, Status: ev.Status, Error: ev.Error,
			TargetsTotal: ev.TargetsTotal, TargetsDone: ev.TargetsDone, TargetsOK: ev.TargetsOK, TargetsFailed: ev.TargetsFailed,
			CreatedAt: wireTime(ev.CreatedAt), FinishedAt: wireTime(ev.FinishedAt), ExpiresAt: wireTime(ev.ExpiresAt),
			Deadline: wireDeadline(ev.Deadline), Metadata: ev.Metadata,
		},
	})
}

// Deliver POSTs ev to ev.URL, signed with the secret of ev.Caller (and,
// under [WebhookLegacySignature], with the legacy secret too); it is a
// batch.DeliverFunc. Its webhook-id is ev.ID, "msg_" and the job id (and
// a per-target event's first idx): the same on every attempt, from every
// node and every build since webhooks began, so a receiver ignores a
// repeat. It returns nil for a 2xx answer,
// a *[WebhookStatusError] for any other, and a *[WebhookSendError] when no
// answer came.
func (s *WebhookSender) Deliver(ctx context.Context, ev batch.WebhookEvent) error {
	body, err := Payload(ev)
	if err != nil {
		return fmt.Errorf("batchhttp: webhook payload: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ev.URL, bytes.NewReader(body))
	if err != nil {
		return &WebhookSendError{msg: "invalid webhook url"}
	}
	ts := s.now().Unix()
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", s.userAgent)
	h.Set(HeaderWebhookID, ev.ID)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderWebhookSignature, s.signatures(ev, ts, body))
	resp, err := s.client.Do(req)
	if err != nil {
		return sendError(ctx, err)
	}
	defer resp.Body.Close()
	_, _ = io.CopyN(io.Discard, resp.Body, maxWebhookAnswer)
	if resp.StatusCode/100 != 2 {
		return &WebhookStatusError{StatusCode: resp.StatusCode}
	}
	return nil
}

// signatures returns the webhook-signature header of a delivery of ev at
// ts: the signature under ev.Caller's secret and, under
// [WebhookLegacySignature], the one under the legacy secret after it. An
// event without a caller (written before events knew their caller, its job
// swept before the upgrade) is signed with the master secret, as every
// event was then, so that an old receiver can still verify it.
func (s *WebhookSender) signatures(ev batch.WebhookEvent, ts int64, body []byte) string {
	key := s.key
	if ev.Caller != "" {
		key = callerKey(s.key, ev.Caller)
	}
	sig := sign(key, ev.ID, ts, body)
	if s.legacy != nil && !hmac.Equal(s.legacy, key) {
		sig += " " + sign(s.legacy, ev.ID, ts, body)
	}
	return sig
}

// WebhookStatusError is a delivery the receiver answered with a status
// other than 2xx.
type WebhookStatusError struct {
	StatusCode int
}

// Error returns "batchhttp: webhook answered <status>".
func (e *WebhookStatusError) Error() string {
	return fmt.Sprintf("batchhttp: webhook answered %d", e.StatusCode)
}

// WebhookSendError is a delivery that got no answer: the connection was
// refused (by the client's guard too), failed or timed out. Its message is
// fixed text, without the URL, its host or an address; it matches
// context.DeadlineExceeded or context.Canceled with [errors.Is] when the
// attempt's context ended it, and wraps the guard's refusal (a
// [batch.OutcomeError] with the outcome blocked, which holds no URL either)
// when the client refused the address, so that the runner does not retry
// it.
type WebhookSendError struct {
	msg   string
	cause error // a context error, or nil
}

// Error returns "batchhttp: webhook not delivered: <reason>".
func (e *WebhookSendError) Error() string { return "batchhttp: webhook not delivered: " + e.msg }

// Unwrap returns the context error that ended the attempt, or the guard's
// refusal, if any.
func (e *WebhookSendError) Unwrap() error { return e.cause }

// sendError turns a client error, which holds the URL, into a
// *WebhookSendError. A guard's refusal (a "blocked: …" error with an
// outcome, as batchnet's) keeps its fixed text and its outcome.
func sendError(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return &WebhookSendError{msg: "timeout or cancelled", cause: ctxErr}
	}
	if oe, ok := errors.AsType[batch.OutcomeError](err); ok && oe.Outcome() == batch.OutcomeBlocked {
		return &WebhookSendError{msg: oe.Error(), cause: oe}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &WebhookSendError{msg: "timeout", cause: context.DeadlineExceeded}
	}
	return &WebhookSendError{msg: "connection failed"}
}

// precheckWebhook runs the host's pre-check on a submit's webhook URL, as
// on a target's: 422 "blocked: webhook: <reason>" (a reason that may name
// the host goes to the caller only, never to a log line).
func (h *Handler) precheckWebhook(r *http.Request, req *request, rawURL string) error {
	if h.precheck == nil {
		return nil
	}
	if err := h.precheck(r.Context(), req.caller, rawURL); err != nil {
		return blockedAnswer("webhook", err)
	}
	return nil
}

// webhookSecretOf serves GET /v1/batch/webhook-secret: the caller's own
// webhook secret, never logged (Cache-Control: no-store, as every answer).
func (h *Handler) webhookSecretOf(w http.ResponseWriter, _ *http.Request, req *request) error {
	if h.webhookSecret == nil {
		return answerFor(batch.ErrWebhooksDisabled, 0)
	}
	secret := h.webhookSecret(req.caller.Name)
	if secret == "" {
		return answerFor(batch.ErrWebhooksDisabled, 0)
	}
	writeJSON(w, http.StatusOK, WebhookSecretResponse{Caller: req.caller.Name, Secret: secret})
	return nil
}
