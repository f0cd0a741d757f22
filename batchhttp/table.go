package batchhttp

import (
	"net/http"
	"slices"
	"strings"
)

// Route is one operation of the wire API that a [Handler] serves.
type Route struct {
	// Method is the operation's HTTP method; a GET route answers HEAD too.
	Method string
	// Path is the path pattern under [HandlerConfig].Prefix, as the OpenAPI
	// document writes it, such as "/v1/batch/{id}". It is also the route
	// label an [ObserveFunc] gets and the log line carries.
	Path string
	// Name is the operation's operationId in the OpenAPI document, such
	// as "submitBatch", and so the name a generated client gives it.
	Name string
}

// routeEntry is a route and the method that serves it.
type routeEntry struct {
	Route
	serve func(h *Handler, w http.ResponseWriter, r *http.Request, req *request) error
}

// routeTable is the one list of the API's operations: NewHandler's routing,
// the Allow headers, [Routes] and the tests that hold the OpenAPI document
// against the handler all read it.
var routeTable = []routeEntry{
	{Route{http.MethodPost, RouteList, "submitBatch"}, (*Handler).submit},
	{Route{http.MethodGet, RouteList, "listBatches"}, (*Handler).list},
	{Route{http.MethodGet, RouteJob, "getBatch"}, (*Handler).status},
	{Route{http.MethodDelete, RouteJob, "cancelBatch"}, (*Handler).cancel},
	{Route{http.MethodGet, RouteResult, "getBatchResult"}, (*Handler).result},
	{Route{http.MethodGet, RouteResults, "streamBatchResults"}, (*Handler).results},
	{Route{http.MethodPost, RouteRetry, "retryBatch"}, (*Handler).retry},
	{Route{http.MethodGet, RouteWebhookSecret, "getWebhookSecret"}, (*Handler).webhookSecretOf},
}

// Routes returns the operations a [Handler] serves, in a fixed order. Each
// call returns a new slice.
func Routes() []Route {
	rs := make([]Route, len(routeTable))
	for i, e := range routeTable {
		rs[i] = e.Route
	}
	return rs
}

// routePaths returns the distinct paths of the route table, in table order.
func routePaths() []string {
	var paths []string
	for _, e := range routeTable {
		if !slices.Contains(paths, e.Path) {
			paths = append(paths, e.Path)
		}
	}
	return paths
}

// allowHeader is the Allow header of a 405 on path: its methods, and HEAD
// beside GET, sorted.
func allowHeader(path string) string {
	var methods []string
	for _, e := range routeTable {
		if e.Path == path {
			methods = append(methods, e.Method)
			if e.Method == http.MethodGet {
				methods = append(methods, http.MethodHead)
			}
		}
	}
	slices.Sort(methods)
	return strings.Join(methods, ", ")
}
