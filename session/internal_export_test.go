package session

// BashTimeoutSeconds exposes bashTimeoutSeconds to the tests.
var BashTimeoutSeconds = bashTimeoutSeconds
