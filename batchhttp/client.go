package batchhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/siftfetch/batchkit/batch"
	"github.com/siftfetch/batchkit/batchnet"
)

// maxResponseBytes caps what the client reads of one answer. A status with
// results holds up to TargetsPerJob envelopes of up to MaxResultBytes each.
const maxResponseBytes = 256 << 20

// Client speaks the /v1/batch wire API. It is safe for concurrent use.
type Client struct {
	base *url.URL
	key  string
	hc   *http.Client
}

// NewClient returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:8080"; the client appends "/v1/batch…" to its path),
// sending key as a bearer token (none if empty). A nil httpClient means
// [http.DefaultClient]. A long-poll waits up to a minute, so the client's
// Timeout, if any, should be longer than that.
func NewClient(baseURL, key string, httpClient *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("batchhttp: base URL must be an http or https URL with a host")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("batchhttp: base URL must have no query or fragment")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &Client{base: u, key: key, hc: httpClient}, nil
}

// APIError is a non-2xx answer of the server.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the answer's "code" (one of the Code constants), or "" if
	// the body was not the JSON error shape: what to branch on.
	Code string
	// Message is the answer's "error", or the status text if the body was
	// not the JSON error shape.
	Message string
	// Hint is the answer's "hint", if any.
	Hint string
	// RetryAfter is the Retry-After header, or zero.
	RetryAfter time.Duration
	// RequestID is the answer's X-Request-Id, to quote in a report.
	RequestID string
}

// Error returns "batchhttp: <status> <message>".
func (e *APIError) Error() string {
	return fmt.Sprintf("batchhttp: %d %s", e.StatusCode, e.Message)
}

// StatusQuery tunes [Client.Status].
type StatusQuery struct {
	// Results asks for the result envelope of each done target.
	Results bool
	// Wait long-polls: the server answers once the job is finished, or
	// (with Since) once its targets_done differs from *Since, or when Wait
	// (capped at 60s by the server) has passed. Zero answers at once.
	Wait time.Duration
	// Since is the targets_done the caller last saw; used with Wait.
	Since *int
	// Failed lists the failed targets only (?status=failed); the
	// answer's Outcomes still count every target.
	Failed bool
}

// Submit submits targets as one job.
func (c *Client) Submit(ctx context.Context, targets []batch.Target) (SubmitResponse, error) {
	return c.SubmitWith(ctx, SubmitRequest{Targets: targets})
}

// SubmitWith is [Client.Submit] of a whole request: its targets and, if
// set, its webhook.
func (c *Client) SubmitWith(ctx context.Context, req SubmitRequest) (SubmitResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return SubmitResponse{}, fmt.Errorf("batchhttp: encode targets: %w", err)
	}
	var resp SubmitResponse
	err = c.do(ctx, http.MethodPost, "/v1/batch", nil, body, &resp)
	return resp, err
}

// Status returns the job's summary.
func (c *Client) Status(ctx context.Context, id string, q StatusQuery) (StatusResponse, error) {
	v := url.Values{}
	if q.Results {
		v.Set("results", "1")
	}
	if q.Failed {
		v.Set("status", string(batch.TargetFailed))
	}
	if q.Wait > 0 {
		v.Set("wait", q.Wait.String())
		if q.Since != nil {
			v.Set("since", strconv.Itoa(*q.Since))
		}
	}
	var resp StatusResponse
	err := c.do(ctx, http.MethodGet, "/v1/batch/"+url.PathEscape(id), v, nil, &resp)
	return resp, err
}

// Result returns target idx of the job, with its result.
func (c *Client) Result(ctx context.Context, id string, idx int) (ResultResponse, error) {
	var resp ResultResponse
	err := c.do(ctx, http.MethodGet, "/v1/batch/"+url.PathEscape(id)+"/"+strconv.Itoa(idx), nil, nil, &resp)
	return resp, err
}

// Retry makes a new job of the finished job's targets that did not finish
// done (POST /v1/batch/{id}/retry); the answer's RetryOf is id. A live job
// is an *[APIError] with Code [CodeJobLive].
func (c *Client) Retry(ctx context.Context, id string) (SubmitResponse, error) {
	var resp SubmitResponse
	err := c.do(ctx, http.MethodPost, "/v1/batch/"+url.PathEscape(id)+"/retry", nil, nil, &resp)
	return resp, err
}

// Cancel cancels the job.
func (c *Client) Cancel(ctx context.Context, id string) (CancelResponse, error) {
	var resp CancelResponse
	err := c.do(ctx, http.MethodDelete, "/v1/batch/"+url.PathEscape(id), nil, nil, &resp)
	return resp, err
}

// List returns the caller's jobs, newest first; limit 0 means the server's
// default (20).
func (c *Client) List(ctx context.Context, limit int) (ListResponse, error) {
	return c.ListWith(ctx, ListQuery{Limit: limit})
}

// ListQuery tunes [Client.ListWith].
type ListQuery struct {
	// Limit caps the jobs listed; 0 means the server's default (20).
	Limit int
	// Metadata, if not empty, lists only the jobs whose metadata holds
	// every pair (GET /v1/batch?metadata.KEY=VALUE).
	Metadata map[string]string
}

// ListWith returns the caller's jobs, newest first, as q asks.
func (c *Client) ListWith(ctx context.Context, q ListQuery) (ListResponse, error) {
	v := url.Values{}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	for k, val := range q.Metadata {
		v.Set("metadata."+k, val)
	}
	var resp ListResponse
	err := c.do(ctx, http.MethodGet, "/v1/batch", v, nil, &resp)
	return resp, err
}

// ResultsQuery tunes [Client.Results].
type ResultsQuery struct {
	// Follow keeps reading as targets finish, until the job is finished:
	// the iterator reconnects, from where it stopped, each time a stream
	// ends at the server's cap while the job is still live.
	Follow bool
	// After, if not nil, starts after this target idx.
	After *int
	// Failed reads the failed targets only (?status=failed).
	Failed bool
}

// Results returns the job's finished targets in idx order, each with its
// result or error, read from the results stream (GET
// /v1/batch/{id}/results) one at a time: memory holds one result whatever
// the job's size. An error ends the sequence: an *[APIError] for a refused
// request, or the cause of a stream that was cut short. Stop the loop early
// to close the stream.
func (c *Client) Results(ctx context.Context, id string, q ResultsQuery) iter.Seq2[TargetStatus, error] {
	return func(yield func(TargetStatus, error) bool) {
		after := q.After
		for {
			status, err := c.resultsOnce(ctx, id, q, after, func(t TargetStatus) bool {
				after = &t.Idx
				return yield(t, nil)
			})
			switch {
			case errors.Is(err, errStopped):
				return
			case err != nil:
				yield(TargetStatus{}, err)
				return
			case !q.Follow || !status.Live():
				return
			}
		}
	}
}

// errStopped is resultsOnce's answer when the caller's loop stopped.
var errStopped = errors.New("stopped")

// resultsOnce reads one results stream through to its end and returns the
// job's status that its trailer gives.
func (c *Client) resultsOnce(ctx context.Context, id string, q ResultsQuery, after *int, yield func(TargetStatus) bool) (batch.JobStatus, error) {
	path := "/v1/batch/" + url.PathEscape(id) + "/results"
	v := url.Values{}
	if q.Follow {
		v.Set("follow", "1")
	}
	if q.Failed {
		v.Set("status", string(batch.TargetFailed))
	}
	if after != nil {
		v.Set("after", strconv.Itoa(*after))
	}
	resp, err := c.send(ctx, http.MethodGet, path, v, nil, NDJSONType)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
		if err != nil {
			return "", fmt.Errorf("batchhttp: GET %s: read answer: %w", path, err)
		}
		return "", apiError(resp, data)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var t TargetStatus
		err := dec.Decode(&t)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("batchhttp: GET %s: read stream: %w", path, err)
		}
		if !yield(t) {
			return "", errStopped
		}
	}
	status := batch.JobStatus(resp.Trailer.Get(StatusTrailer))
	if status == "" {
		return "", fmt.Errorf("batchhttp: GET %s: stream ended without its %s trailer", path, StatusTrailer)
	}
	return status, nil
}

// do sends one request and decodes a 2xx answer into out; any other answer
// is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body []byte, out any) error {
	resp, err := c.send(ctx, method, path, query, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("batchhttp: %s %s: read answer: %w", method, path, err)
	}
	if len(data) > maxResponseBytes {
		return fmt.Errorf("batchhttp: %s %s: answer larger than %d bytes", method, path, maxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return apiError(resp, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("batchhttp: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// send sends one request and returns the answer, whatever its status; the
// caller closes its body.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body []byte, accept string) (*http.Response, error) {
	target := c.base.String() + path // path holds escaped ids
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, fmt.Errorf("batchhttp: %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("batchhttp: %s %s: %w", method, path, err)
	}
	return resp, nil
}

// apiError builds the error of a non-2xx answer.
func apiError(resp *http.Response, body []byte) *APIError {
	e := &APIError{
		StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After")),
		RequestID: resp.Header.Get(RequestIDHeader),
	}
	var er ErrorResponse
	if err := json.Unmarshal(body, &er); err == nil && er.Error != "" {
		e.Code, e.Message, e.Hint = er.Code, er.Error, er.Hint
	} else {
		e.Message = strings.ToLower(http.StatusText(resp.StatusCode))
		if e.Message == "" {
			e.Message = "unexpected answer"
		}
	}
	return e
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	d, _ := batchnet.ParseRetryAfter(v, time.Now())
	return d
}

// IsNotFound reports whether err is a 404 answer.
func IsNotFound(err error) bool {
	ae, ok := errors.AsType[*APIError](err)
	return ok && ae.StatusCode == http.StatusNotFound
}
