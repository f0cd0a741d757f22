package batchcli

import "runtime/debug"

// modulePath is the path of the batchkit module.
const modulePath = "github.com/siftfetch/batchkit"

// Version returns the version of the batchkit module built into this
// program, as [debug.ReadBuildInfo] reports it: the main module's version
// when the program is part of batchkit (as the example CLI is), else that
// of the batchkit dependency (a host such as sift). It is "(devel)" when the
// build records no version, as a build from a working tree without VCS
// stamping does.
func Version() string {
	const devel = "(devel)"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return devel
	}
	m := &info.Main
	if m.Path != modulePath {
		m = nil
		for _, d := range info.Deps {
			if d.Path == modulePath {
				m = d
				break
			}
		}
	}
	if m == nil {
		return devel
	}
	if m.Replace != nil {
		m = m.Replace
	}
	if m.Version == "" {
		return devel
	}
	return m.Version
}
