//go:build !race

package streamtest

// raceEnabled: the race detector allocates on its own account, so
// allocation budgets do not hold under it.
const raceEnabled = false
