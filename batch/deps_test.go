package batch_test

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// moduleRule is the module policy of the repository: its modules, by
// directory relative to the root module's, and the modules each one's
// go.mod may require directly (entries match as in allowedPrefix). The
// root module requires the design card's three (and goleak, and go-cmp,
// for tests), so that a host that imports batch, batchstore and batchhttp
// inherits nothing else; each heavy dependency is in a module of its own
// (see TestModuleRule). bench/, the peers' benchmarks, is no part of the
// library and is left out. A module not listed may not exist.
var moduleRule = map[string][]string{
	".":                     rootRequires,
	"batchstore/pgstore":    {module, pgx, goleakModule},
	"batchotel":             {module, module + "/batchstore/pgstore", otelAPI, otelSDK, goleakModule}, // pgstore: its cross-node test
	"batchhttp/openapitest": {module, kinOpenAPIModule, goleakModule},
	"internal/tomltest":     append([]string{module, goleakModule}, tomlLibraries...),
	"batchmcp":              {module, mcpSDK, "github.com/VictoriaMetrics/metrics", goleakModule},
	"batchrobots":           {module, robotstxt, goleakModule},
	"examples":              {"*"},
}

// rootRequires are the modules the root module may require directly.
var rootRequires = []string{"github.com/google/uuid", "zombiezen.com/go/sqlite", "github.com/VictoriaMetrics/metrics",
	goleakModule, "github.com/google/go-cmp"}

// heavy are the modules that must not be in the root module's module graph
// at all, and so in no host's that requires only the root: the PostgreSQL
// driver, OpenTelemetry (and the grpc its exporters bring), the OpenAPI
// validator (and its router, JSON Schema validator and YAML parser), the
// TOML libraries, the MCP SDK (and the JWT, OAuth 2 (with the Google
// Cloud metadata client it brings), JSON, JSON Schema and URI template
// libraries it brings), the robots.txt parser.
var heavy = []string{"github.com/jackc/", "go.opentelemetry.io/", "google.golang.org/grpc", "google.golang.org/genproto",
	"github.com/grpc-ecosystem/", "github.com/getkin/", "github.com/gorilla/", "github.com/santhosh-tekuri/", "go.yaml.in/",
	"github.com/BurntSushi/", "github.com/pelletier/",
	"github.com/modelcontextprotocol/", "github.com/golang-jwt/", "golang.org/x/oauth2", "cloud.google.com/",
	"github.com/segmentio/", "github.com/google/jsonschema-go", "github.com/yosida95/", robotstxt}

const goleakModule = "go.uber.org/goleak"

// depRule is the dependency policy of the repository's packages, whichever
// module holds them, as a statement in the style of go/build/deps_test.go:
// for each package pattern, the imports from outside the repository it may
// have besides the standard library, and the repository's packages it may
// import. A package not listed may not exist.
var depRule = []struct {
	pkg      string   // package path, relative to the root module's; "/..." matches below
	external []string // allowed non-stdlib import path prefixes outside the repository
	internal []string // allowed packages of the repository
}{
	{"batch", []string{"github.com/google/uuid", "github.com/VictoriaMetrics/metrics"}, []string{"batch/batchdriver", "batch/batchobserve"}},
	{"batch/batchdriver", nil, nil},
	{"batch/batchobserve", nil, []string{"batch/batchdriver"}},
	{"batch/batchsift", nil, []string{"batch"}},
	{"batch/batchtest", nil, []string{"batch", "batch/batchdriver"}},
	{"batch/batchdriver/batchdrivertest", nil, []string{"batch", "batch/batchdriver", "batch/batchtest", "batch/batchsift"}},
	{"batchstore", []string{"zombiezen.com/go/sqlite", "modernc.org/"}, []string{"batch/batchdriver", "internal/migrations", "internal/ablation"}},
	{"batchstore/pgstore", []string{pgx}, []string{"batch/batchdriver", "internal/migrations", "internal/ablation"}},
	{"batchstore/pgstore/pgstoretest", []string{pgx}, nil}, // test support: imported by test files only
	{"batchnet", nil, []string{"batch"}},
	{"batchhttp", nil, []string{"batch", "batchnet"}},
	{"batchhttp/batchserver", []string{"github.com/VictoriaMetrics/metrics"}, []string{"batch", "batchhttp"}},
	{"batchhttp/openapitest", nil, nil}, // tests only
	{"batchcli", nil, []string{"batch", "batchhttp"}},
	{"batchconsole", nil, []string{"batch", "batch/batchdriver"}},
	{"internal/migrations", nil, nil},
	{"internal/ablation", nil, nil},                                                    // the stores' bench-only switches
	{"internal/apitest", nil, []string{"batch", "batchhttp", "batchhttp/batchserver"}}, // test support: imported by test files only
	{"internal/conntest", nil, nil},                                                    // test support: imported by test files only
	{"internal/tomltest", nil, nil},                                                    // tests only
	{"batchotel", []string{otelAPI}, []string{"batch", "batch/batchdriver", "batch/batchobserve"}},
	{"batchmcp", []string{mcpSDK, "github.com/VictoriaMetrics/metrics"}, []string{"batch", "batchhttp"}},
	{"batchrobots", []string{robotstxt}, []string{"batch", "batchnet"}},
	{"examples/...", []string{"*"}, []string{"*"}},
}

// testDepRule adds what test files may import on top.
var testDepRule = map[string][]string{
	"batch":                             {"batch/batchtest", "batch/batchsift"},
	"batch/batchdriver":                 {},
	"batch/batchobserve":                {},
	"batch/batchsift":                   {},
	"batch/batchtest":                   {},
	"batch/batchdriver/batchdrivertest": {"batch/batchtest"},
	"batchstore":                        {"batch", "batch/batchtest", "batch/batchdriver/batchdrivertest"},
	"batchstore/pgstore":                {"batch", "batch/batchtest", "batch/batchdriver/batchdrivertest", "batchstore/pgstore/pgstoretest"},
	"batchstore/pgstore/pgstoretest":    {},
	"batchnet":                          {},
	"internal/migrations":               {},
	"internal/ablation":                 {},
	"internal/apitest":                  {},
	"batchhttp":                         {"batch/batchtest", "batch/batchdriver", "batch/batchdriver/batchdrivertest", "batch/batchsift", "batchhttp/batchserver", "internal/conntest"},
	"batchhttp/batchserver":             {"batch/batchtest", "internal/conntest"},
	"batchhttp/openapitest":             {"batch", "batchhttp", "batch/batchtest", "batch/batchsift", "batchhttp/batchserver"},
	"batchcli":                          {"batch/batchtest", "batchhttp", "batchhttp/batchserver", "internal/apitest", "batch/batchsift"},
	"batchotel":                         {"batch/batchtest", "batch/batchsift", "batchstore", "batchstore/pgstore", "batchstore/pgstore/pgstoretest"},
	"batchconsole":                      {"batch/batchtest", "batch/batchdriver"},
	"internal/tomltest":                 {"batch", "batch/batchtest"},
	"internal/conntest":                 {},
	"batchmcp":                          {"batch/batchtest", "batch/batchsift", "batchhttp/batchserver", "internal/conntest"},
	"batchrobots":                       {"batch/batchtest"},
}

// testExternal are the imports from outside the repository that every
// package's test files may have: the goroutine-leak check each TestMain
// runs.
var testExternal = []string{goleakModule}

// testOnlyExternal are imports from outside the repository that one
// package's test files may have and its other files may not. The first two
// are test-only modules of their own, so that the root module does not
// require what they import.
var testOnlyExternal = map[string][]string{
	// holds every answer of batchhttp's tests against openapi.json
	"batchhttp/openapitest": {kinOpenAPI},
	// decodes batch.Config's block with each TOML library
	"internal/tomltest": tomlLibraries,
	// batchotel's tests record spans with the SDK's in-memory exporter.
	"batchotel": {otelSDK},
}

// otelAPI is the OpenTelemetry API module and otelSDK its SDK: only
// batchotel imports the API (and the examples, which build a provider),
// and only its tests the SDK, so that a host that does not trace never
// compiles OpenTelemetry, and one that does picks its own SDK and
// exporter (see TestOtelOnlyInBatchotel).
const (
	otelAPI = "go.opentelemetry.io/otel"
	otelSDK = "go.opentelemetry.io/otel/sdk"
)

// isOtelSDK reports whether imp is part of OpenTelemetry but not of its
// API: the SDK, the exporters, the contrib instrumentation.
func isOtelSDK(imp string) bool {
	return strings.HasPrefix(imp, "go.opentelemetry.io/") && !allowedPrefix(imp, []string{otelAPI}) ||
		allowedPrefix(imp, []string{otelSDK, otelAPI + "/exporters"})
}

// tomlLibraries are the two common TOML decoders a host may read its
// [batch] block with; batch's tests decode Config with both.
var tomlLibraries = []string{"github.com/BurntSushi/toml", "github.com/pelletier/go-toml/v2"}

// kinOpenAPI is the OpenAPI validator batchhttp/openapitest uses, as a
// prefix of its packages, and kinOpenAPIModule its module.
const (
	kinOpenAPI       = "github.com/getkin/kin-openapi/"
	kinOpenAPIModule = "github.com/getkin/kin-openapi"
)

const module = "github.com/siftfetch/batchkit"

// mcpSDK is the official MCP SDK: only batchmcp imports it (and the
// examples, whose tests are its clients), so that a host that serves no
// MCP never compiles it, nor the JWT and OAuth 2 libraries it brings.
const mcpSDK = "github.com/modelcontextprotocol/go-sdk"

// robotstxt is the robots.txt parser: only batchrobots imports it, so that
// a host that checks no robots.txt never requires it.
const robotstxt = "github.com/temoto/robotstxt"

// pgx is the PostgreSQL driver: only batchstore/pgstore may import it (and
// pgstoretest, the tests' database, and the tests of examples, to tidy a
// test database), so that a host that does not use PostgreSQL never
// compiles it (see TestPgxOnlyInPgstore).
const pgx = "github.com/jackc/pgx/v5"

func isStdlib(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// goCmd runs the go command in dir, with the workspace off (each module
// as its own go.mod has it, which is what its users get), and returns its
// standard output: go may report on standard error what it downloads.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out)
}

// rootDir returns the root module's directory.
func rootDir(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(goCmd(t, ".", "list", "-m", "-f", "{{.Dir}}"))
}

// modules returns the directories of the repository's modules, relative
// to the root module's ("." for the root), but bench/. It fails t for one
// that moduleRule does not list.
func modules(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (rel == "bench" || d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && rel != ".") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if _, ok := moduleRule[dir]; !ok {
			t.Errorf("module %s is not in the module rule", dir)
		}
		dirs = append(dirs, dir)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestModuleRule checks each module's go.mod against moduleRule, and the
// root module's whole module graph: no heavy module is in it, and each
// requirement its go.mod marks indirect is one that an allowed requirement
// brings.
func TestModuleRule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go mod and go list")
	}
	root := rootDir(t)
	for _, dir := range modules(t, root) {
		var mod struct {
			Module  struct{ Path string }
			Require []struct {
				Path     string
				Indirect bool
			}
		}
		if err := json.Unmarshal([]byte(goCmd(t, filepath.Join(root, dir), "mod", "edit", "-json")), &mod); err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimSuffix(module+"/"+dir, "/."); mod.Module.Path != want {
			t.Errorf("module %s is %s, want %s", dir, mod.Module.Path, want)
		}
		for _, r := range mod.Require {
			if !r.Indirect && !allowedPrefix(r.Path, moduleRule[dir]) {
				t.Errorf("module %s may not require %s", dir, r.Path)
			}
		}
		if dir != "." {
			continue
		}
		// What the allowed requirements bring, in the graph of go.mod
		// requirements.
		var direct []string
		for _, r := range mod.Require {
			if !r.Indirect {
				direct = append(direct, r.Path)
			}
		}
		edges := map[string][]string{}
		sc := bufio.NewScanner(strings.NewReader(goCmd(t, root, "mod", "graph")))
		for sc.Scan() {
			from, to, _ := strings.Cut(sc.Text(), " ")
			if strings.Contains(from, "@") { // not the root's own requirements
				fromPath, _, _ := strings.Cut(from, "@")
				toPath, _, _ := strings.Cut(to, "@")
				edges[fromPath] = append(edges[fromPath], toPath)
			}
		}
		brought := map[string]bool{}
		var walk func(p string)
		walk = func(p string) {
			for _, q := range edges[p] {
				if !brought[q] {
					brought[q] = true
					walk(q)
				}
			}
		}
		for _, p := range direct {
			walk(p)
		}
		for _, r := range mod.Require {
			if r.Indirect && !brought[r.Path] {
				t.Errorf("the root module requires %s (indirect), which none of %q brings", r.Path, direct)
			}
		}
		for _, m := range strings.Fields(goCmd(t, root, "list", "-m", "-f", "{{.Path}}", "all")) {
			if allowedPrefix(m, heavy) {
				t.Errorf("the root module's module graph holds %s", m)
			}
		}
	}
}

// TestDependencyRule checks every package of every module against depRule
// and testDepRule.
func TestDependencyRule(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	root := rootDir(t)
	var lines []string
	for _, dir := range modules(t, root) {
		out := goCmd(t, filepath.Join(root, dir), "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .TestImports \" \"}}|{{join .XTestImports \" \"}}", "./...")
		lines = append(lines, strings.Split(strings.TrimSpace(out), "\n")...)
	}
	for _, line := range lines {
		parts := strings.Split(line, "|")
		pkg := strings.TrimPrefix(strings.TrimPrefix(parts[0], module), "/")
		if msg := checkImports(pkg, strings.Fields(parts[1]), nil); msg != "" {
			t.Error(msg)
		}
		testImports := append(strings.Fields(parts[2]), strings.Fields(parts[3])...)
		if msg := checkImports(pkg, testImports, append(testDepRule[pkg], pkg)); msg != "" {
			t.Error("test files: " + msg)
		}
	}
}

// checkImports returns a violation message, or "".
func checkImports(pkg string, imports, extraInternal []string) string {
	rule := -1
	for i, r := range depRule {
		if r.pkg == pkg || strings.HasSuffix(r.pkg, "/...") && strings.HasPrefix(pkg+"/", strings.TrimSuffix(r.pkg, "...")) {
			rule = i
			break
		}
	}
	if rule < 0 {
		return "package " + pkg + " is not in the dependency rule"
	}
	r := depRule[rule]
	for _, imp := range imports {
		switch {
		case strings.HasPrefix(imp, "github.com/jackc/") && pkg != "batchstore/pgstore" && pkg != "batchstore/pgstore/pgstoretest" &&
			!(extraInternal != nil && strings.HasPrefix(pkg, "examples/")): // an example's test may tidy a database
			return pkg + " may not import " + imp + ": only batchstore/pgstore (and pgstoretest, the tests' database) imports pgx"
		case strings.HasPrefix(imp, "go.opentelemetry.io/") && pkg != "batchotel" && !strings.HasPrefix(pkg, "examples/"):
			return pkg + " may not import " + imp + ": only batchotel imports OpenTelemetry"
		case isOtelSDK(imp) && pkg == "batchotel" && extraInternal == nil:
			return pkg + " may not import " + imp + ": the SDK and exporters are the host's choice (tests only)"
		case isStdlib(imp):
		case strings.HasPrefix(imp, module+"/") || imp == module:
			inner := strings.TrimPrefix(imp, module+"/")
			if !allowed(inner, r.internal) && !allowed(inner, extraInternal) {
				return pkg + " may not import " + inner
			}
		case extraInternal != nil && (allowedPrefix(imp, testExternal) || allowedPrefix(imp, testOnlyExternal[pkg])):
		default:
			if !allowedPrefix(imp, r.external) {
				return pkg + " may not import " + imp
			}
		}
	}
	return ""
}

func allowed(p string, list []string) bool {
	for _, a := range list {
		if a == "*" || a == p {
			return true
		}
	}
	return false
}

// allowedPrefix reports whether p is one of list or below one: an entry
// that ends in "/" matches any path it starts, another one the path itself
// and the paths below it.
func allowedPrefix(p string, list []string) bool {
	for _, a := range list {
		if a == "*" || p == a || strings.HasPrefix(p, a) && (strings.HasSuffix(a, "/") || strings.HasPrefix(p, a+"/")) {
			return true
		}
	}
	return false
}

func TestCheckImports(t *testing.T) {
	t.Parallel()
	f := func(pkg string, imports []string, wantViolation bool) {
		t.Helper()
		if got := checkImports(pkg, imports, nil) != ""; got != wantViolation {
			t.Errorf("checkImports(%s, %v) violation = %v, want %v", pkg, imports, got, wantViolation)
		}
	}
	f("batch", []string{"context", "github.com/google/uuid"}, false)
	f("batch", []string{"zombiezen.com/go/sqlite"}, true)
	f("batch", []string{module + "/batchstore"}, true)
	f("batchhttp", []string{module + "/batchstore"}, true)
	f("batchhttp", []string{module + "/batch", "net/http"}, false)
	f("batchcli", []string{module + "/batchhttp"}, false)
	f("batchcli", []string{module + "/batchstore"}, true)
	f("batch/batchtest", []string{module + "/batchhttp"}, true)
	f("examples/batchd", []string{module + "/batchstore", "github.com/x/y"}, false)
	f("batchstore/pgstore", []string{pgx + "/pgxpool", module + "/batch/batchdriver"}, false)
	f("batchstore/pgstore", []string{module + "/batch"}, true)
	f("batchstore/pgstore", []string{module + "/batchstore"}, true)
	f("batchstore", []string{pgx}, true)
	f("batch", []string{pgx + "/pgconn"}, true)
	f("examples/batchd", []string{module + "/batchstore/pgstore"}, false)
	f("examples/batchd", []string{pgx + "/pgxpool"}, true)
	f("batchhttp", []string{kinOpenAPI + "openapi3"}, true)
	f("batchhttp/openapitest", []string{kinOpenAPI + "openapi3"}, true) // outside its tests
	f("batchstore/pgstore/pgstoretest", []string{pgx}, false)
	f("internal/tomltest", []string{"github.com/BurntSushi/toml"}, true) // outside its tests
	f("newpkg", nil, true)

	// Test files: kin-openapi in batchhttp/openapitest's only, the TOML
	// libraries in internal/tomltest's only.
	ft := func(pkg string, imports []string, wantViolation bool) {
		t.Helper()
		if got := checkImports(pkg, imports, append(testDepRule[pkg], pkg)) != ""; got != wantViolation {
			t.Errorf("checkImports(%s test files, %v) violation = %v, want %v", pkg, imports, got, wantViolation)
		}
	}
	ft("batchhttp/openapitest", []string{kinOpenAPI + "openapi3filter", "go.uber.org/goleak", module + "/batchhttp"}, false)
	ft("batchhttp/openapitest", []string{module + "/batchstore"}, true)
	ft("batchhttp", []string{kinOpenAPI + "openapi3filter"}, true)
	ft("batchcli", []string{kinOpenAPI + "openapi3"}, true)
	ft("batch", []string{kinOpenAPI + "openapi3"}, true)
	ft("internal/tomltest", []string{"github.com/pelletier/go-toml/v2", "github.com/BurntSushi/toml", module + "/batch"}, false)
	ft("batch", []string{"github.com/pelletier/go-toml/v2"}, true)
	ft("batchhttp", []string{"github.com/BurntSushi/toml"}, true)

	// OpenTelemetry: the API in batchotel only, the SDK in its tests only.
	f("batchotel", []string{otelAPI, otelAPI + "/trace", otelAPI + "/semconv/v1.43.0", module + "/batch"}, false)
	f("batchotel", []string{otelSDK + "/trace"}, true)
	f("batchotel", []string{otelAPI + "/exporters/otlp/otlptrace/otlptracehttp"}, true)
	f("batchotel", []string{"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"}, true)
	f("batchotel", []string{module + "/batchstore"}, true)
	f("batch", []string{otelAPI + "/trace"}, true)
	f("batchhttp", []string{otelAPI}, true)
	f("batchstore", []string{otelAPI + "/attribute"}, true)
	f("examples/batchd", []string{otelSDK + "/trace", module + "/batchotel"}, false)
	f("batch", []string{"github.com/google/uuidx"}, true) // a prefix of a name is not the name
	ft("batchotel", []string{otelSDK + "/trace/tracetest", module + "/batchstore", module + "/batchstore/pgstore/pgstoretest"}, false)
	ft("batchotel", []string{pgx}, true) // its database goes through pgstoretest
	ft("batchhttp", []string{otelSDK + "/trace"}, true)
	ft("batchstore", []string{pgx}, true)

	// The MCP SDK: in batchmcp (and the examples) only.
	f("batchmcp", []string{mcpSDK + "/mcp", mcpSDK + "/jsonrpc", module + "/batch", module + "/batchhttp", "github.com/VictoriaMetrics/metrics"}, false)
	f("batchmcp", []string{module + "/batchstore"}, true)
	f("batchmcp", []string{"github.com/golang-jwt/jwt/v5"}, true)
	f("batchhttp", []string{mcpSDK + "/mcp"}, true)
	f("batch", []string{mcpSDK + "/jsonrpc"}, true)
	f("examples/batchd", []string{mcpSDK + "/mcp", module + "/batchmcp"}, false)
	ft("batchmcp", []string{module + "/batch/batchtest", module + "/batchhttp/batchserver", module + "/internal/conntest", "go.uber.org/goleak"}, false)
	ft("batchmcp", []string{module + "/batchstore"}, true)
	ft("batchhttp", []string{mcpSDK + "/mcp"}, true)

	// The robots.txt parser: in batchrobots (and the examples) only.
	f("batchrobots", []string{robotstxt, module + "/batch", module + "/batchnet"}, false)
	f("batchrobots", []string{module + "/batchhttp"}, true)
	f("batchnet", []string{robotstxt}, true)
	f("batch", []string{robotstxt}, true)
	f("examples/batchd", []string{module + "/batchrobots"}, false)
	ft("batchrobots", []string{"go.uber.org/goleak", module + "/batchnet", module + "/batch/batchtest"}, false)
	ft("batchrobots", []string{module + "/batchhttp"}, true)
}

// libraryPkgs are the library's packages in the root module, which a host
// that does not trace and does not use PostgreSQL imports.
var libraryPkgs = []string{module + "/batch", module + "/batch/batchtest", module + "/batchstore",
	module + "/batchnet", module + "/batchhttp", module + "/batchcli"}

// deps returns the packages that pkgs, in the module in dir (relative to
// the root module's), depend on, tests left out.
func deps(t *testing.T, dir string, pkgs ...string) []string {
	t.Helper()
	return strings.Fields(goCmd(t, filepath.Join(rootDir(t), dir), append([]string{"list", "-deps"}, pkgs...)...))
}

// TestOtelOnlyInBatchotel checks the whole import graph of the library's
// packages but batchotel, tests left out: none of them compiles
// OpenTelemetry; and batchotel's compiles its API, not its SDK.
func TestOtelOnlyInBatchotel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, dep := range append(deps(t, ".", libraryPkgs...), deps(t, "batchstore/pgstore", module+"/batchstore/pgstore")...) {
		if strings.HasPrefix(dep, "go.opentelemetry.io/") || dep == module+"/batchotel" {
			t.Errorf("the library outside batchotel depends on %s", dep)
		}
	}
	sawAPI := false
	for _, dep := range deps(t, "batchotel", module+"/batchotel") {
		sawAPI = sawAPI || dep == otelAPI+"/trace"
		// (The API itself brings go.opentelemetry.io/auto/sdk, its hook for
		// eBPF auto-instrumentation, which is no SDK a host would pick.)
		if allowedPrefix(dep, []string{otelSDK, otelAPI + "/exporters"}) {
			t.Errorf("batchotel depends on %s outside its tests", dep)
		}
	}
	if !sawAPI {
		t.Errorf("batchotel does not depend on %s/trace: the check checks nothing", otelAPI)
	}
}

// TestKinOpenAPIOnlyInTests checks the whole import graph of the library's
// packages, tests left out: none of them compiles kin-openapi or what it
// brings (gorilla/mux, a JSON Schema validator, a YAML parser), nor the
// TOML libraries internal/tomltest decodes batch's config with.
func TestKinOpenAPIOnlyInTests(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, dep := range append(deps(t, ".", libraryPkgs...), deps(t, "batchstore/pgstore", module+"/batchstore/pgstore")...) {
		for _, bad := range append([]string{"github.com/getkin/", "github.com/gorilla/", "github.com/santhosh-tekuri/", "go.yaml.in/"}, tomlLibraries...) {
			if strings.HasPrefix(dep, bad) {
				t.Errorf("the library depends on %s outside its tests", dep)
			}
		}
	}
}

// TestPgxOnlyInPgstore checks the whole import graph, not just direct
// imports: a host that imports the core or an adapter other than
// batchstore/pgstore never compiles pgx.
func TestPgxOnlyInPgstore(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	for _, dep := range deps(t, ".", libraryPkgs...) {
		if strings.HasPrefix(dep, "github.com/jackc/") || strings.HasPrefix(dep, module+"/batchstore/pgstore") {
			t.Errorf("%v depend on %s", libraryPkgs, dep)
		}
	}
}
