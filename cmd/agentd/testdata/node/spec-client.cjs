// The example client of the per-session WebSocket protocol
// (shared/specs/session-websocket-protocol.md, "Example Client
// Implementation"), copied unchanged between the marks below: issue 13
// asks that the spec's own client work against agentd. spec-client-run.cjs
// supplies the WebSocket class it expects and reads what it receives.
// --- the spec's class, unchanged ---
class ConversionWebSocketClient {
  constructor(sessionId, token) {
    this.sessionId = sessionId;
    this.token = token;
    this.reconnectDelay = 1000; // Start at 1 second
    this.maxReconnectDelay = 60000; // Cap at 60 seconds
    this.connect();
  }

  connect() {
    const url = `ws://localhost:8000/api/v1/ws/conversions/${this.sessionId}?token=${this.token}`;
    this.ws = new WebSocket(url);

    this.ws.onopen = () => {
      console.log("Connected");
      this.reconnectDelay = 1000; // Reset backoff
      this.subscribe();
    };

    this.ws.onmessage = (event) => {
      const message = JSON.parse(event.data);
      this.handleMessage(message);
    };

    this.ws.onerror = (error) => {
      console.error("WebSocket error:", error);
    };

    this.ws.onclose = (event) => {
      console.log(`Disconnected: ${event.code} ${event.reason}`);
      if (event.code !== 1000) {
        // Not normal closure
        this.scheduleReconnect();
      }
    };

    // Heartbeat
    setInterval(() => {
      if (this.ws.readyState === WebSocket.OPEN) {
        this.send({ type: "ping", timestamp: new Date().toISOString() });
      }
    }, 30000);
  }

  subscribe() {
    this.send({ type: "subscribe", session_id: this.sessionId });
  }

  send(message) {
    this.ws.send(JSON.stringify(message) + "\n");
  }

  handleMessage(message) {
    switch (message.type) {
      case "subscribed":
        console.log("Subscribed to session:", message.session_id);
        break;
      case "progress_update":
        console.log(
          `Progress: ${message.progress_percentage}% - ${message.message}`,
        );
        break;
      case "status_change":
        console.log(
          `State changed: ${message.old_state} → ${message.new_state}`,
        );
        break;
      case "completed":
        console.log("Workflow completed:", message.results);
        break;
      case "error":
        console.error("Error:", message.message);
        break;
      case "pong":
        // Heartbeat response
        break;
      default:
        console.warn("Unknown message type:", message.type);
    }
  }

  scheduleReconnect() {
    setTimeout(() => {
      console.log(`Reconnecting in ${this.reconnectDelay}ms...`);
      this.connect();
      this.reconnectDelay = Math.min(
        this.reconnectDelay * 2,
        this.maxReconnectDelay,
      );
    }, this.reconnectDelay);
  }

  close() {
    this.send({ type: "unsubscribe", session_id: this.sessionId });
    this.ws.close(1000, "Client closing");
  }
}
// --- end of the spec's class ---

module.exports = ConversionWebSocketClient;
