package cli

import (
	"fmt"
	"runtime/debug"
)

// version is agentd's version as `agentd version` prints it and serve
// announces it in server_ready.
func version() string {
	info, _ := debug.ReadBuildInfo()
	return describeVersion(Version, info)
}

// describeVersion is the -ldflags override when there is one, else the
// main module's version from the build information (a tag for `go
// install ...@v1.2.3`, a pseudo-version for a build in a git checkout)
// with the commit and whether the tree had changes, as far as the
// toolchain recorded them: builds with -buildvcs=false, `go run` and
// tests have no VCS information, and a tree outside git has no version.
func describeVersion(override string, info *debug.BuildInfo) string {
	if override != "" {
		return override
	}
	v := "dev"
	if info == nil {
		return v
	}
	if mv := info.Main.Version; mv != "" && mv != "(devel)" {
		v = mv
	}
	var rev string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		return fmt.Sprintf("%s (rev %s, modified)", v, rev)
	}
	return fmt.Sprintf("%s (rev %s)", v, rev)
}
