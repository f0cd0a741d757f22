// Package batchmcp serves a [batch.Runner] to AI agents over the Model
// Context Protocol (MCP).
//
// An agent with many URLs submits them as one job with a tool call, gets a
// job id back at once, and reads progress and results later. A caller over
// MCP is the same caller as over the HTTP API of package batchhttp: the
// same jobs, ownership and caps. The package is a module of its own, so a
// host that does not serve MCP never compiles the MCP SDK.
//
// # Getting started
//
// Build a [Handler] with [New] from the runner and the host's
// authenticator, then mount it at [Path] behind the host's own middleware:
//
//	set := metrics.NewSet() // m.Add(set, nil) on batchserver's Metrics
//	h, err := batchmcp.New(batchmcp.Config{
//		Runner:       runner,
//		Authenticate: auth,                        // the CallerFunc the HTTP API uses
//		Precheck:     client.Guard().PrecheckFunc, // batchnet: refuses private addresses at submit
//		Logger:       logger,
//		Metrics:      set,
//	})
//	mux.Handle(batchmcp.Path, h) // "/mcp"
//
// The handler serves streamable HTTP, stateless, with JSON answers. Any
// node on a shared store answers any request, task methods included.
// Authenticate runs before the MCP server sees a request, and writes its
// own refusal.
//
// # Tools
//
// batch_submit takes the targets, with the runner's options as JSON
// Schema. It answers the job id, its status and whether it was reused.
// batch_status reports progress; wait_seconds waits up to [MaxWaitSeconds]
// for a change. batch_result reads one target's content in pages, by byte
// offset. batch_cancel cancels a job. Each finished target is also a
// resource, batch://{job_id}/{idx}, paged with ?offset=.
//
// Input the caller must change is a JSON-RPC error, -32602, with the
// stable code and a hint in its data. A refusal of well-formed input is a
// tool result with isError set, its text the JSON of a [ToolError]. The
// codes are batchhttp's Code constants, such as not_found, caller_busy,
// too_many_targets, blocked and invalid_option.
//
// # Tasks
//
// The handler speaks the MCP Tasks extension ([TasksExtension], protocol
// 2026-07-28). For a request that declares it, batch_submit becomes a
// task: the task id is the job id, sent once the job is committed.
// tasks/get answers its progress, then the job's status as the tool
// result. tasks/cancel cancels the job. It also speaks the earlier
// 2025-11-25 tasks, with tasks/result, for clients that ask with
// params.task.
//
// # Limits
//
// Every answer is bounded by Config.MaxAnswerBytes, 20000 bytes by
// default ([DefaultMaxAnswerBytes]). At one token per byte at worst, an
// answer stays under the 25,000 tokens Claude Code refuses. Content and
// long target lists are paged to fit, on character boundaries. A request
// body is capped (Config.MaxBodyBytes) and read within
// Config.BodyTimeout. Each caller holds at most Config.MaxWaitsPerCaller
// waiting calls and Config.MaxSubmitsPerCaller submits at once. No log
// line carries a URL or a tool's arguments.
//
// # More
//
// In the repository, docs/mcp.md shows what an agent sees and how to set
// up Claude Code and VS Code. docs/design/mcp.md says why the package is
// built this way.
package batchmcp
