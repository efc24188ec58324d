//go:build agentd_no_embedded_nats

package cli

import (
	"errors"
	"log/slog"

	"github.com/agentd-dev/agentd/internal/cluster"
	"github.com/agentd-dev/agentd/internal/config"
)

// startEmbeddedNATS refuses: this binary was built without the embedded
// NATS server.
func startEmbeddedNATS(string, config.Cluster, *cluster.Key, *slog.Logger) (*embeddedNATS, error) {
	return nil, errors.New("this agentd was built without the embedded NATS server (tag agentd_no_embedded_nats): run a NATS server with JetStream (nats-server -js) and give --cluster nats://host:4222")
}
