// A stock OpenAI Realtime web client, written as OpenAI's own WebRTC examples are: a short-lived client key from
// the app's backend (here the server itself, which the page's access cookie lets mint one), then a call to
// /v1/realtime/calls: the microphone on the call's track, the replies on the remote track, and the Realtime
// events on the "oai-events" data channel. Nothing in it is specific to this server but its address.
"use strict";

const $ = (id) => document.getElementById(id);
const GATHER_MS = 3000; // the server takes the caller's candidates in the offer (no trickle)

class RealtimeCall {
  constructor() {
    this.pc = null;
    this.events = null;
    this.lines = new Map(); // item or response id -> its line in the log
  }

  async start() {
    const minted = await fetch("/v1/realtime/client_secrets", {
      method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ expires_after: { anchor: "created_at", seconds: 60 }, session: { type: "realtime" } }),
    });
    if (!minted.ok) throw new Error(await why(minted));
    const key = (await minted.json()).value;

    const microphone = await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    const pc = this.pc = new RTCPeerConnection();
    pc.ontrack = (event) => { $("reply-audio").srcObject = event.streams[0] || new MediaStream([event.track]); };
    pc.onconnectionstatechange = () => {
      if (pc.connectionState === "failed" || pc.connectionState === "closed") this.ended();
    };
    pc.addTrack(microphone.getAudioTracks()[0], microphone);
    this.microphone = microphone;
    this.events = pc.createDataChannel("oai-events");
    this.events.onmessage = (event) => this.onEvent(JSON.parse(event.data));
    this.events.onopen = () => setEnabled(true);
    this.events.onclose = () => this.ended();

    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc, GATHER_MS);
    const answer = await fetch("/v1/realtime/calls", {
      method: "POST", body: pc.localDescription.sdp,
      headers: { "Authorization": `Bearer ${key}`, "Content-Type": "application/sdp" },
    });
    if (!answer.ok) throw new Error(await why(answer));
    await pc.setRemoteDescription({ type: "answer", sdp: await answer.text() });
  }

  send(event) {
    if (this.events && this.events.readyState === "open") this.events.send(JSON.stringify(event));
  }

  say(text) {
    this.send({ type: "conversation.item.create",
      item: { type: "message", role: "user", content: [{ type: "input_text", text }] } });
    this.send({ type: "response.create" });
  }

  onEvent(event) {
    switch (event.type) {
      case "session.created": setState("listening"); break;
      case "input_audio_buffer.speech_started": setState("hearing"); break;
      case "conversation.item.input_audio_transcription.completed":
        this.line(event.item_id, "user").textContent = event.transcript || "(nothing recognised)"; break;
      case "conversation.item.added":
        if (event.item.role === "user" && event.item.content.some((c) => c.type === "input_text")) {
          this.line(event.item.id, "user").textContent = event.item.content.map((c) => c.text || "").join(" ");
        }
        break;
      case "response.created": setState("thinking"); break;
      case "response.output_audio_transcript.delta":
      case "response.output_text.delta":
        this.line(event.response_id, "bot").textContent += event.delta; break;
      case "response.output_audio_transcript.done":
        this.line(event.response_id, "bot").textContent = event.transcript; break;
      case "response.output_text.done":
        this.line(event.response_id, "bot").textContent = event.text; break;
      case "output_audio_buffer.started": setState("speaking"); break;
      case "output_audio_buffer.stopped":
      case "output_audio_buffer.cleared": setState("listening"); break;
      case "response.done":
        if (event.response.status === "cancelled" && this.lines.has(event.response.id)) {
          this.lines.get(event.response.id).classList.add("interrupted");
        }
        if ($("state").dataset.state === "thinking") setState("listening");
        break;
      case "error": log("tool failed", `error: ${event.error.message}`); break;
      default: break;
    }
  }

  line(id, kind) {
    if (!this.lines.has(id)) this.lines.set(id, log(kind, ""));
    return this.lines.get(id);
  }

  ended() {
    if (!this.pc) return;
    this.stop();
    setState("offline", "call ended");
  }

  stop() {
    if (this.events) this.events.close();
    if (this.pc) this.pc.close();
    if (this.microphone) this.microphone.getTracks().forEach((t) => t.stop());
    this.pc = this.events = this.microphone = null;
    $("reply-audio").srcObject = null;
    setEnabled(false);
  }
}

async function why(response) {
  try {
    return (await response.json()).error.message;
  } catch (e) {
    return `HTTP ${response.status}`;
  }
}

function gathered(pc, ms) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    pc.addEventListener("icegatheringstatechange", () => pc.iceGatheringState === "complete" && resolve());
    setTimeout(resolve, ms);
  });
}

function log(kind, text) {
  const hint = $("log").querySelector(".hint");
  if (hint) hint.remove();
  const p = document.createElement("p");
  p.className = `msg ${kind}`;
  p.textContent = text;
  $("log").appendChild(p);
  $("log").scrollTop = $("log").scrollHeight;
  return p;
}

function setState(state, label) {
  $("state").dataset.state = state;
  $("state").textContent = label || state;
}

function setEnabled(on) {
  $("text").disabled = $("send").disabled = !on;
  $("call").textContent = on ? "Hang up" : "Start call";
  $("call").classList.toggle("on", on);
}

const call = new RealtimeCall();
window.vitaCall = call; // for the page's tests
$("call").onclick = async () => {
  if (call.pc) {
    call.stop();
    setState("offline", "not connected");
    return;
  }
  $("banner").hidden = true;
  setState("offline", "connecting…");
  try {
    await call.start();
  } catch (e) {
    call.stop();
    setState("offline", "not connected");
    $("banner").textContent = `The call did not connect: ${e.message}`;
    $("banner").hidden = false;
  }
};
$("compose").onsubmit = (event) => {
  event.preventDefault();
  const text = $("text").value.trim();
  if (!text) return;
  call.say(text);
  $("text").value = "";
};
