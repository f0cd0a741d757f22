package batchmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/siftfetch/batchkit/batchhttp"
)

// instructions tell a model what the server is for.
const instructions = `Fetch many URLs as one background job instead of a loop of single fetches. ` +
	`batch_submit takes the whole list and answers at once with a job_id; the targets are fetched one at a time in the background. ` +
	`batch_status reports progress (wait_seconds waits for a change); batch_result reads one target's content in pages; batch_cancel stops a job. ` +
	`Submitting the same list again returns the same job.`

// newServer builds the one MCP server every request is served by: the
// tools, the result resources, the task methods and the middleware that
// logs, counts and turns submits into tasks.
func (h *Handler) newServer() (*mcp.Server, error) {
	s := mcp.NewServer(&mcp.Implementation{Name: h.cfg.Name, Version: h.cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Capabilities: &mcp.ServerCapabilities{
			Tools:      &mcp.ToolCapabilities{},
			Resources:  &mcp.ResourceCapabilities{},
			Extensions: map[string]any{TasksExtension: map[string]any{}},
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	for _, t := range h.tools() {
		s.AddTool(t.tool, t.handle)
	}
	s.AddResourceTemplate(resourceTemplate, h.readResource)
	if err := h.addTaskMethods(s); err != nil {
		return nil, err
	}
	s.AddReceivingMiddleware(h.observe, h.tasks)
	return s, nil
}

// record is what one request's handlers tell its log line.
type record struct {
	jobID   string
	targets int
	reused  *bool
	status  string
	code    string // the stable code of a refusal
}

type recordKey struct{}

// recordOf returns the request's record, or a throwaway one.
func recordOf(ctx context.Context) *record {
	if r, ok := ctx.Value(recordKey{}).(*record); ok {
		return r
	}
	return &record{}
}

// observe logs and counts every request. A log line carries the method,
// the tool, the caller, the job id and the refusal's code: never a URL,
// never arguments, and for a restricted caller no code either.
func (h *Handler) observe(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		start := time.Now()
		rec := &record{targets: -1}
		ctx = context.WithValue(ctx, recordKey{}, rec)
		tool := ""
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
			tool = toolLabel(p.Name)
		}
		res, err := next(ctx, method, req)
		outcome := "ok"
		switch {
		case err != nil:
			outcome = "error"
			if rec.code == "" {
				rec.code = codeOfRPC(err)
			}
		case isToolError(res):
			outcome = "tool_error"
		}
		d := time.Since(start)
		label := methodLabel(method)
		if h.metrics != nil {
			h.metrics.observe(label, tool, outcome, d)
		}
		if strings.HasPrefix(method, "notifications/") {
			return res, err
		}
		attrs := []slog.Attr{slog.String("method", label)}
		if id := intakeOf(ctx).requestID; id != "" {
			attrs = append(attrs, slog.String("request_id", id))
		}
		if tool != "" {
			attrs = append(attrs, slog.String("tool", tool))
		}
		caller, _ := callerOf(ctx)
		attrs = append(attrs, slog.String("caller", caller.Name), slog.String("result", outcome))
		if rec.jobID != "" {
			attrs = append(attrs, slog.String("job_id", rec.jobID))
		}
		if rec.targets >= 0 {
			attrs = append(attrs, slog.Int("targets", rec.targets))
		}
		if rec.status != "" {
			attrs = append(attrs, slog.String("status", rec.status))
		}
		if rec.reused != nil {
			attrs = append(attrs, slog.Bool("reused", *rec.reused))
		}
		if rec.code != "" && !caller.Restricted {
			attrs = append(attrs, slog.String("error", rec.code))
		}
		attrs = append(attrs, slog.Duration("duration", d))
		level := slog.LevelDebug // as the HTTP API's request lines: a busy server writes many
		if rec.code == batchhttp.CodeInternal {
			level = slog.LevelError
		}
		h.log.LogAttrs(ctx, level, "batch mcp", attrs...)
		return res, err
	}
}

func isToolError(res mcp.Result) bool {
	r, ok := res.(*mcp.CallToolResult)
	return ok && r.IsError
}

// codeOfRPC is the stable code a JSON-RPC error carries in its data, or
// a code for its JSON-RPC code.
func codeOfRPC(err error) string {
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return batchhttp.CodeInternal
	}
	var data struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(we.Data, &data) == nil && data.Code != "" {
		return data.Code
	}
	switch we.Code {
	case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidRequest, jsonrpc.CodeParseError:
		return batchhttp.CodeInvalidRequest
	}
	return batchhttp.CodeInternal
}

// methods are the method labels of the metrics; any other is "other".
var methods = map[string]bool{
	"initialize": true, "server/discover": true, "ping": true, "tools/list": true, "tools/call": true,
	"resources/list": true, "resources/templates/list": true, "resources/read": true,
	methodTasksGet: true, methodTasksCancel: true, methodTasksResult: true,
	"notifications/initialized": true, "notifications/cancelled": true,
}

func methodLabel(m string) string {
	if methods[m] {
		return m
	}
	return "other"
}

func toolLabel(name string) string {
	switch name {
	case toolSubmit, toolStatus, toolResult, toolCancel:
		return name
	}
	return "other"
}

// meters are the handler's metrics.
type meters struct {
	set    *metrics.Set
	prefix string
}

// newMeters registers the series of every tool's calls at once, so that
// a scrape shows them before the first call.
func newMeters(set *metrics.Set, prefix string) *meters {
	m := &meters{set: set, prefix: prefix}
	for _, tool := range []string{toolSubmit, toolStatus, toolResult, toolCancel} {
		for _, result := range []string{"ok", "tool_error", "error"} {
			m.requests("tools/call", tool, result)
		}
	}
	m.set.GetOrCreatePrometheusHistogram(fmt.Sprintf(`%s_mcp_request_seconds{method="tools/call"}`, m.prefix))
	return m
}

func (m *meters) requests(method, tool, result string) *metrics.Counter {
	return m.set.GetOrCreateCounter(fmt.Sprintf(`%s_mcp_requests_total{method=%q,tool=%q,result=%q}`, m.prefix, method, tool, result))
}

func (m *meters) observe(method, tool, result string, d time.Duration) {
	m.requests(method, tool, result).Inc()
	m.set.GetOrCreatePrometheusHistogram(fmt.Sprintf(`%s_mcp_request_seconds{method=%q}`, m.prefix, method)).Update(d.Seconds())
}

// MetricsHelp returns the # HELP text of each metric family the handler
// registers in Config.Metrics, by full name, for an exposition that
// writes them (batchserver.Metrics.Add takes it). It is nil without
// Config.Metrics.
func (h *Handler) MetricsHelp() map[string]string {
	if h.metrics == nil {
		return nil
	}
	p := h.metrics.prefix
	return map[string]string{
		p + "_mcp_requests_total":  "MCP requests by method, tool and result (ok, tool_error, error).",
		p + "_mcp_request_seconds": "MCP request handling time by method.",
	}
}
