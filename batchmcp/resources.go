package batchmcp

import (
	"context"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// resourceTemplate names each target's content: batch://{job_id}/{idx},
// paged with ?offset= as batch_result is.
var resourceTemplate = &mcp.ResourceTemplate{
	Name:        "batch-target",
	Title:       "A batch target's content",
	URITemplate: "batch://{job_id}/{idx}{?offset}",
	MIMEType:    "text/plain",
	Description: "The content a batch job fetched for one target, one page at a time: the _meta of the answer " +
		"has total_bytes and, while more remains, next_offset; read on with ?offset=<next_offset>.",
}

// resourceURI is the URI of a target's content page at offset.
func resourceURI(jobID string, idx, offset int) string {
	u := "batch://" + jobID + "/" + strconv.Itoa(idx)
	if offset > 0 {
		u += "?offset=" + strconv.Itoa(offset)
	}
	return u
}

// parseResourceURI is the inverse of resourceURI.
func parseResourceURI(raw string) (jobID string, idx, offset int, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "batch" || u.Host == "" || u.User != nil || u.Fragment != "" {
		return "", 0, 0, false
	}
	rest := strings.TrimPrefix(u.Path, "/")
	idx, err = strconv.Atoi(rest)
	if err != nil || idx < 0 || strconv.Itoa(idx) != rest {
		return "", 0, 0, false
	}
	q := u.Query()
	for k := range q {
		if k != "offset" {
			return "", 0, 0, false
		}
	}
	if s := q.Get("offset"); s != "" {
		offset, err = strconv.Atoi(s)
		if err != nil || offset < 0 {
			return "", 0, 0, false
		}
	}
	return u.Host, idx, offset, true
}

// readResource serves resources/read of a target's content: one page,
// with the target's status, outcome, error and paging in _meta. Another
// caller's target reads as an unknown one.
func (h *Handler) readResource(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	jobID, idx, offset, ok := parseResourceURI(uri)
	if !ok {
		recordOf(ctx).code = notFound.code
		return nil, mcp.ResourceNotFoundError(uri)
	}
	recordOf(ctx).jobID = jobID
	caller, _ := callerOf(ctx)
	tr, err := h.readTarget(ctx, caller, jobID, idx)
	if isNotFound(err) {
		recordOf(ctx).code = notFound.code
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		r := refusalFor(err, 0)
		recordOf(ctx).code = r.code
		return nil, r.rpcError()
	}
	p, err := newPage(tr, offset)
	if err != nil {
		r := refusalFor(err, 0)
		recordOf(ctx).code = r.code
		return nil, r.rpcError()
	}
	meta := mcp.Meta{"status": string(tr.Status), "offset": offset, "total_bytes": len(p.content)}
	if tr.Error != "" {
		meta["error"] = tr.Error
	}
	if tr.Hint != "" {
		meta["hint"] = tr.Hint
	}
	return fit(p, h.cfg.MaxAnswerBytes, h, func(content string, next int) (*mcp.ReadResourceResult, error) {
		m := mcp.Meta{}
		for k, v := range meta {
			m[k] = v
		}
		if next >= 0 {
			m["next_offset"] = next
		}
		return &mcp.ReadResourceResult{
			Cacheable: mcp.Cacheable{CacheScope: "private"}, // one caller's content
			Contents:  []*mcp.ResourceContents{{URI: uri, MIMEType: "text/plain", Text: content, Meta: m}},
		}, nil
	})
}
