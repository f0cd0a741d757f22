module github.com/siftfetch/batchkit/batchrobots

go 1.26.0

replace github.com/siftfetch/batchkit => ../

require (
	github.com/siftfetch/batchkit v0.0.0-00010101000000-000000000000
	github.com/temoto/robotstxt v1.1.2
	go.uber.org/goleak v1.3.0
)

require (
	github.com/VictoriaMetrics/metrics v1.45.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/valyala/fastrand v1.1.0 // indirect
	github.com/valyala/histogram v1.2.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
