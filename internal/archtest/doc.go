// Package archtest holds no code: its test guards agentd's import graph
// (see imports_test.go), so that the layers stay layers as the code
// changes. Faces translate the shared layer and do not import each
// other; the shared core imports no face and not the engine (the core
// is built around interfaces the engine satisfies, wired in cli); and no
// production package imports test machinery. wiretags_test.go keeps
// wire names off the shared pipeline's exported types.
package archtest
