package proclimit

import "testing"

// Cgroup2DirOf places a process's cgroup under the cgroup2 mount, also
// when the mount shows only part of the hierarchy, and refuses a path
// the mount does not show.
func TestCgroup2DirOf(t *testing.T) {
	const whole = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	const part = "30 25 0:26 /ctr /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"
	const spaced = "30 25 0:26 / /mnt/cg\\040two rw - cgroup2 cgroup2 rw\n"
	for _, tc := range []struct {
		name, cgroups, mountinfo, want string
		ok                             bool
	}{
		{"whole hierarchy", "0::/user.slice/a\n", whole, "/sys/fs/cgroup/user.slice/a", true},
		{"part of it", "0::/ctr/job\n", part, "/sys/fs/cgroup/job", true},
		{"the mount's root itself", "0::/ctr\n", part, "/sys/fs/cgroup", true},
		{"outside the part shown", "0::/other/job\n", part, "", false},
		{"a sibling with the same prefix", "0::/ctrl/job\n", part, "", false},
		{"escaped mount point", "0::/a\n", spaced, "/mnt/cg two/a", true},
		{"v1 only", "4:memory:/x\n", whole, "", false},
		{"outside the namespace's view", "0::/../x\n", whole, "", false},
		{"no cgroup2 mount", "0::/a\n", "30 25 0:26 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n", "", false},
	} {
		got, ok := Cgroup2DirOf(tc.cgroups, tc.mountinfo)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
