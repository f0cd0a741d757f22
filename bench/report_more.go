package main

import (
	"fmt"

	"github.com/siftfetch/batchkit/batch"
)

func (r *report) httpSection(b *md) {
	h := r.HTTP
	b.p("## Submit, status and one-result latency over HTTP")
	b.p("batchhttp's Handler, wired as the example daemon wires it (bearer-key auth, the URL pre-check, request ids), on the SQLite "+
		"store at its defaults (`synchronous=FULL`, %d workers), served on 127.0.0.1 and driven by this command's own load generator in "+
		"the same process, so that server and agents share the machine's %d cores. Each agent is a caller with a key of its own and one "+
		"keep-alive connection, and sends its next request as soon as the last is answered; a phase ends after %s or %s requests, "+
		"whichever comes first, and fails on any unexpected status. A status read asks for the summary of the agent's finished job of "+
		"32 targets; a result read asks for one of its 10 KiB results; a submit posts 32 new URLs (the caps are raised so that no submit "+
		"is refused, and the fetcher of submitted jobs waits until the run ends, so that their drain does not load the reads). "+
		"Latencies are per request, from sending it to reading the whole answer.",
		batch.DefaultWorkers, r.Machine.Cores, h.Phase, fmtRate(float64(h.MaxReqs)))
	b.head("route", "agents", "requests/s", "p50", "p99", "requests")
	for _, rt := range httpRoutes {
		for _, a := range h.Agents {
			res := h.Results[rt.Name][a]
			b.row("`"+rt.Route+"`", fmt.Sprint(a), fmtRate(res.rps()), fmtDur(quantile(res.Latencies, 0.50)),
				fmtDur(quantile(res.Latencies, 0.99)), fmtRate(float64(res.Requests)))
		}
	}
	b.line("")
}
