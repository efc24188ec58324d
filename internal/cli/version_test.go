package cli

import (
	"runtime/debug"
	"testing"
)

func TestDescribeVersion(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	const rev = "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name     string
		override string
		info     *debug.BuildInfo
		want     string
	}{
		{"no build information", "", nil, "dev"},
		{"-buildvcs=false", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"go run outside git", "", &debug.BuildInfo{}, "dev"},
		{"go install of a tag", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"git checkout, clean", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-0123456789ab"}, Settings: vcs(rev, "false")},
			"v0.0.0-20260101120000-0123456789ab (rev 0123456789ab)"},
		{"git checkout, changed", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20260101120000-0123456789ab+dirty"}, Settings: vcs(rev, "true")},
			"v0.0.0-20260101120000-0123456789ab+dirty (rev 0123456789ab, modified)"},
		{"revision without a module version", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("abc1234", "true")},
			"dev (rev abc1234, modified)"},
		{"-ldflags wins", "v9.9.9", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: vcs(rev, "true")}, "v9.9.9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describeVersion(tt.override, tt.info); got != tt.want {
				t.Errorf("describeVersion = %q, want %q", got, tt.want)
			}
		})
	}
}
