// Package health holds agentd's circuit breakers, the pi-server protocol's
// health_check payload (spec §21) and agentd's metrics with the
// /metrics, /healthz and /readyz HTTP handlers.
//
// Circuit breakers (spec §21.1) guard model providers, one per provider
// name, and bash commands, one breaker for the whole server. A breaker is
// closed (normal), open (failing: requests are rejected at once with the
// spec's §22.1 error text) or half_open (testing recovery: a few probe
// requests pass; if they succeed the breaker closes, the first failure
// reopens it). Callers that stream ask [Breaker.Allow] before starting and
// report the outcome with the returned function once the stream has ended.
//
// The spec gives no thresholds or cooldowns; the defaults are
// [DefaultProviderOptions] and [DefaultBashOptions] and every value is an
// option.
//
// Metrics live on a registry of their own ([Metrics.Registry], package
// metrics), which the server owns: there is no process-wide registry.
package health
