package piserver

import "github.com/agentd-dev/agentd/internal/pipeline"

// recoveryData is the data of get_startup_recovery and of the
// startup_recovery_summary event.
func recoveryData(r pipeline.StartupRecovery) any { return r }

// historyData is the data of get_command_history.
func historyData(h pipeline.CommandHistory) any { return h }
