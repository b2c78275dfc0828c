// Vita's page: microphone (AudioWorklet, binary int16 frames), camera (2 fps JPEG), gap-free reply playback,
// and a live log of the conversation. The Socket.IO protocol is documented in README.md.
"use strict";

const MIC_RATE = 16000; // what the server's VAD wants; the browser resamples the microphone for us
const FRAME_MS = 32; // one binary audio message
const REPLY_RATE = 24000; // the server's reply audio
const DUCKED_GAIN = 0.2; // the reply's volume while the user may be interrupting it
const CAMERA_FPS = 2;

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------------------------------------------------
// Reply audio: each binary message is scheduled right after the previous one; stop() drops everything.
class Player {
  constructor() {
    this.ctx = null;
    this.sources = new Set();
    this.nextStart = 0;
    this.received = 0; // reply audio messages that came over the socket
  }

  ensure() {
    if (!this.ctx) {
      this.ctx = new AudioContext({ sampleRate: REPLY_RATE });
      this.gain = this.ctx.createGain();  // ducked while the user may be interrupting
      this.gain.connect(this.ctx.destination);
    }
    if (this.ctx.state === "suspended") this.ctx.resume();
  }

  // The user started speaking over the reply: quieter at once; the server decides whether it interrupts
  // (stop_tts) or was a "mm-hmm" or a cough (unduck). The server ducks what it has not sent yet itself (it paces
  // the reply just ahead of playback), so only what is queued here is ducked here.
  duck(on) {
    if (!this.ctx) return;
    const gain = this.gain.gain, now = this.ctx.currentTime;
    const holding = on && this.nextStart > now;  // with nothing queued, all that comes is ducked already
    gain.cancelScheduledValues(now);
    gain.setTargetAtTime(holding ? DUCKED_GAIN : 1, now, 0.015);
    if (holding) gain.setTargetAtTime(1, this.nextStart, 0.015);
  }

  play(bytes) {
    this.received += 1;
    this.ensure();
    const pcm = new Int16Array(bytes);
    if (!pcm.length) return;
    const buffer = this.ctx.createBuffer(1, pcm.length, REPLY_RATE);
    const out = buffer.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) out[i] = pcm[i] / 32768;
    const source = this.ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(this.gain);
    const start = Math.max(this.ctx.currentTime + 0.02, this.nextStart);
    source.start(start);
    this.nextStart = start + buffer.duration;
    this.sources.add(source);
    source.onended = () => this.sources.delete(source);
  }

  stop() {
    for (const source of this.sources) {
      try { source.stop(); } catch (e) { /* already ended */ }
    }
    this.sources.clear();
    this.nextStart = 0;
    this.duck(false);
  }

  get playing() {
    return this.sources.size > 0;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Microphone: a 16 kHz AudioContext (or the device rate, announced to the server) and the mic-frames worklet.
class Mic {
  constructor(onFrame, onLevel) {
    this.onFrame = onFrame;
    this.onLevel = onLevel;
    this.ctx = null;
    this.stream = null;
    this.node = null;
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
    });
    try {
      this.ctx = new AudioContext({ sampleRate: MIC_RATE });
      await this.connect();
    } catch (e) {
      // Some browsers cannot feed a microphone into a context at another rate: use the device's rate and let
      // the server resample.
      if (this.ctx) await this.ctx.close();
      this.ctx = new AudioContext();
      await this.connect();
    }
    return this.ctx.sampleRate;
  }

  async connect() {
    await this.ctx.audioWorklet.addModule("/static/mic-worklet.js");
    const source = this.ctx.createMediaStreamSource(this.stream);
    this.node = new AudioWorkletNode(this.ctx, "mic-frames", { processorOptions: { frameMs: FRAME_MS } });
    this.node.port.onmessage = (event) => {
      this.onFrame(event.data.pcm);
      this.onLevel(event.data.level);
    };
    source.connect(this.node);
  }

  async stop() {
    if (this.node) this.node.port.onmessage = null;
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    if (this.ctx) await this.ctx.close();
    this.ctx = this.stream = this.node = null;
    this.onLevel(0);
  }
}

// ---------------------------------------------------------------------------------------------------------
// WebRTC audio: the microphone's track goes to the server in Opus, the reply comes back on the same peer
// connection and plays in an <audio> element. Signalling rides on the Socket.IO connection (rtc_offer →
// rtc_answer); text, states and barge-in stay there too. connect() resolves once audio flows, or throws (the page
// then falls back to Socket.IO PCM).
class RtcAudio {
  constructor(socket, element, onLost) {
    this.socket = socket;
    this.element = element;
    this.onLost = onLost; // called if a connected call drops
    this.pc = null;
  }

  async connect(track, iceServers, timeoutMs = 8000) {
    const pc = (this.pc = new RTCPeerConnection({ iceServers }));
    pc.addTrack(track);
    pc.ontrack = (e) => {
      this.element.srcObject = e.streams[0] || new MediaStream([e.track]);
      this.element.play().catch(() => { /* autoplay: it plays after the next click */ });
    };
    await pc.setLocalDescription(await pc.createOffer());
    await this.gathered(pc, 2000);
    let onAnswer, onFailed;
    const answer = new Promise((resolve, reject) => {
      onAnswer = resolve;
      onFailed = (m) => reject(new Error(m && m.message ? m.message : "refused"));
      this.socket.on("rtc_answer", onAnswer);
      this.socket.on("rtc_failed", onFailed);
    });
    this.socket.emit("rtc_offer", { type: "offer", sdp: pc.localDescription.sdp });
    try {
      await pc.setRemoteDescription(await this.within(answer, timeoutMs, "no answer from the server"));
    } finally { // a late answer must not be taken for the next attempt's
      this.socket.off("rtc_answer", onAnswer);
      this.socket.off("rtc_failed", onFailed);
    }
    await this.within(new Promise((resolve, reject) => {
      const check = () => {
        if (pc.connectionState === "connected") resolve();
        else if (pc.connectionState === "failed" || pc.connectionState === "closed") reject(new Error("ICE failed"));
      };
      pc.onconnectionstatechange = check;
      check();
    }), timeoutMs, "no route to the server (a TURN server may be needed)");
    pc.onconnectionstatechange = () => { // later: the call dropped (network change, server restart)
      if (this.pc === pc && (pc.connectionState === "failed" || pc.connectionState === "closed")) this.onLost();
    };
  }

  // Candidates go in the offer (no trickle): wait for gathering, or send what there is after `ms`.
  gathered(pc, ms) {
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => pc.iceGatheringState === "complete" && resolve();
      pc.addEventListener("icegatheringstatechange", done);
      setTimeout(resolve, ms);
    });
  }

  within(promise, ms, why) {
    return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(why)), ms))]);
  }

  duck(on) {
    this.element.volume = on ? DUCKED_GAIN : 1;
  }

  get live() {
    return !!this.pc && this.pc.connectionState === "connected";
  }

  close() {
    if (this.pc) this.pc.close();
    this.pc = null;
    this.element.srcObject = null;
    this.duck(false);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Camera: a preview, and a JPEG data URL every 500 ms (VITA's rate and format).
class Camera {
  constructor(video, onFrame) {
    this.video = video;
    this.onFrame = onFrame;
    this.stream = null;
    this.timer = null;
    this.canvas = document.createElement("canvas");
  }

  async start() {
    this.stream = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 384 } });
    this.video.srcObject = this.stream;
    this.video.hidden = false;
    this.timer = setInterval(() => this.capture(), 1000 / CAMERA_FPS);
  }

  capture() {
    const { videoWidth: w, videoHeight: h } = this.video;
    if (!w || !h) return;
    this.canvas.width = w;
    this.canvas.height = h;
    this.canvas.getContext("2d").drawImage(this.video, 0, 0, w, h);
    this.onFrame(this.canvas.toDataURL("image/jpeg", 0.7));
  }

  stop() {
    clearInterval(this.timer);
    if (this.stream) this.stream.getTracks().forEach((t) => t.stop());
    this.video.srcObject = null;
    this.video.hidden = true;
    this.stream = this.timer = null;
  }
}

// ---------------------------------------------------------------------------------------------------------
// The conversation log: one bubble per user turn and per reply, filled in as text streams.
class Log {
  constructor(element) {
    this.element = element;
    this.replies = new Map();
    this.users = new Map();
    this.panels = new Map();
    this.tools = new Map();  // turn id -> its tool lines
  }

  add(kind, text) {
    const hint = this.element.querySelector(".hint");
    if (hint) hint.remove();
    const p = document.createElement("p");
    p.className = `msg ${kind}`;
    p.textContent = text;
    this.element.appendChild(p);
    this.element.scrollTop = this.element.scrollHeight;
    return p;
  }

  user(turnId, text) {
    let p = this.users.get(turnId);
    if (!p) {
      p = this.add("user", text);
      this.users.set(turnId, p);
    } else {
      p.textContent = text;
    }
  }

  replyDelta(turnId, text) {
    let p = this.replies.get(turnId);
    if (!p) {
      p = this.add("bot", "");
      this.replies.set(turnId, p);
      this.panelAfter(turnId, p);
    }
    p.textContent += text;
    this.element.scrollTop = this.element.scrollHeight;
  }

  replyDone(turnId, text) {
    const p = this.replies.get(turnId);
    if (p) p.textContent = text;
    else if (text) {
      this.replies.set(turnId, this.add("bot", text));
      this.panelAfter(turnId, this.replies.get(turnId));
    }
  }

  // A turn's timings start before its reply exists (end of speech is timed at once): the panel goes under the
  // reply once there is one.
  panelAfter(turnId, reply) {
    const panel = this.panels.get(turnId);
    if (panel) reply.after(panel);
  }

  // A tool the assistant called for this turn: name, arguments, and what it answered (or its error).
  tool(turnId, call) {
    const args = call.arguments && call.arguments !== "{}" ? call.arguments : "";
    const p = this.add(`tool${call.ok ? "" : " failed"}`, `🔧 ${call.name}(${args}) → ${call.result}`);
    p.title = `${call.outcome}, ${Math.round((call.duration_s || 0) * 1000)} ms`;
    const reply = this.replies.get(turnId);
    if (reply) reply.before(p);
    if (!this.tools.has(turnId)) this.tools.set(turnId, []);
    this.tools.get(turnId).push(p);
  }

  // What the assistant saw for this turn: the picture it used and what it found in it (text read, objects, people,
  // fingers), shown before its reply.
  scene(turnId, seen) {
    const p = this.add("scene", "");
    if (seen.image) {
      const img = document.createElement("img");
      img.src = seen.image;
      img.alt = "the picture the assistant used";
      p.appendChild(img);
    }
    const facts = [];
    if (seen.text && seen.text.length) facts.push(`read: ${seen.text.map((t) => `“${t}”`).join(" ")}`);
    if (seen.objects && seen.objects.length) facts.push(`object: ${seen.objects.join(" or ")}`);
    if (seen.people !== null && seen.people !== undefined) facts.push(`people: ${seen.people}`);
    if (seen.fingers !== null && seen.fingers !== undefined) facts.push(`fingers up: ${seen.fingers}`);
    const caption = document.createElement("span");
    caption.textContent = `👁 ${facts.join(" · ") || seen.description}`;
    p.appendChild(caption);
    p.title = seen.description;
    const reply = this.replies.get(turnId);
    if (reply) reply.before(p);
    if (!this.tools.has(turnId)) this.tools.set(turnId, []);
    this.tools.get(turnId).push(p);
  }

  withdrawn(turnId) {
    for (const map of [this.users, this.replies, this.panels]) {
      const element = map.get(turnId);
      if (element) element.remove();
      map.delete(turnId);
    }
    for (const p of this.tools.get(turnId) || []) p.remove();
    this.tools.delete(turnId);
  }

  interrupted(turnId) {
    const p = this.replies.get(turnId);
    if (p) p.classList.add("interrupted");
  }

  // A collapsible panel under the turn's reply: the headline number, then every stage's time.
  timings(turnId, m) {
    let panel = this.panels.get(turnId);
    if (!panel) {
      panel = document.createElement("details");
      panel.className = "turn-timings";
      panel.append(document.createElement("summary"), document.createElement("dl"));
      const reply = this.replies.get(turnId);
      if (reply) reply.after(panel);
      else this.element.appendChild(panel);
      this.panels.set(turnId, panel);
    }
    const rows = TIMING_ROWS.filter(([key]) => m[key] !== undefined);
    const headline = m.voice_to_voice_s !== undefined ? `answered ${m.voice_to_voice_s.toFixed(2)} s after you stopped`
      : m.first_audio_s !== undefined ? `first sound after ${m.first_audio_s.toFixed(2)} s` : "timings";
    panel.querySelector("summary").textContent = headline;
    const dl = panel.querySelector("dl");
    dl.replaceChildren(...rows.flatMap(([key, label, unit]) => {
      const dt = document.createElement("dt");
      const dd = document.createElement("dd");
      dt.textContent = label;
      dd.textContent = unit === "s" ? `${m[key].toFixed(2)} s` : `${Math.round(m[key] * 10) / 10}${unit}`;
      return [dt, dd];
    }));
  }

  clear() {
    this.element.innerHTML = "";
    this.replies.clear();
    this.users.clear();
    this.panels.clear();
  }
}

// [key, label, unit] in the order a turn happens.
const TIMING_ROWS = [
  ["voice_to_voice_s", "you stopped → first sound", "s"],
  ["end_of_speech_s", "end of speech detected", "s"],
  ["asr_s", "speech recognition", "s"],
  ["first_token_s", "first word generated", "s"],
  ["first_piece_s", "first phrase ready to speak", "s"],
  ["first_chunk_s", "first sound synthesized", "s"],
  ["first_audio_s", "turn sent → first sound", "s"],
  ["generate_s", "whole reply generated", "s"],
  ["tokens_per_s", "generation speed", " tokens/s"],
  ["context_turns", "earlier exchanges remembered", ""],
];

// ---------------------------------------------------------------------------------------------------------
class App {
  constructor() {
    this.player = new Player();
    // Over WebRTC the microphone's frames are not sent on the socket (the worklet still shows the level).
    this.mic = new Mic((pcm) => this.transport === "socket" && this.socket.connected && this.socket.emit("audio", pcm),
      (level) => this.level(level));
    this.rtc = null;
    this.starting = false; // the microphone and a call are being set up
    this.micRate = MIC_RATE;
    this.transport = null; // the live audio transport while talking: "webrtc" or "socket"
    this.webrtc = { enabled: false, ice_servers: [] }; // what the server offers (server_status)
    this.camera = new Camera($("preview"), (url) => this.socket.connected && this.socket.emit("video_frame", url));
    this.log = new Log($("log"));
    this.ready = false;
    this.seated = false; // server_status came: this connection has a seat
    this.waiting = false; // in line for a seat (`waiting`), until server_status seats us
    this.talking = false;
    this.toastTimer = null;
    this.healthTimer = null;
    this.turnTimings = {};
    this.timingsTurn = null;
    this.bindControls();
    this.connect();
    this.loadVoices();
  }

  // --- server connection ---------------------------------------------------------------------------------
  connect() {
    // wait: when every seat is taken, the server keeps us in line (`waiting`) and seats us in turn.
    this.socket = io({ transports: ["websocket"], reconnection: false, auth: { wait: true } });
    const s = this.socket;
    s.on("connect", () => this.connected());
    s.on("disconnect", (reason) => this.disconnected(reason));
    s.on("connect_error", () => this.banner("Cannot reach the server. Is it running? Reload to try again."));
    s.on("server_status", (status) => this.serverStatus(status));
    s.on("too_many_users", () => this.banner("The assistant is busy with other users right now. Try again later."));
    s.on("waiting", (m) => this.waitingInLine(m));
    s.on("out_time", () => this.banner("You were disconnected after a long silence. Reload the page to talk again."));
    s.on("notice", (m) => m && m.message && this.banner(`Notice: ${m.message}`));
    s.on("audio", (bytes) => this.player.play(bytes));
    s.on("stop_tts", () => { this.player.stop(); if (this.rtc) this.rtc.duck(false); });
    s.on("duck", () => { this.player.duck(true); if (this.rtc) this.rtc.duck(true); });
    s.on("unduck", () => { this.player.duck(false); if (this.rtc) this.rtc.duck(false); });
    s.on("state", (m) => this.setState(m.state));
    s.on("vad", (m) => m.speaking && this.setState("hearing"));
    s.on("turn", (m) => { if (m.source === "text") this.log.user(m.turn_id, m.text); });
    s.on("transcript", (m) => this.log.user(m.turn_id, m.text || "(nothing recognised)"));
    s.on("reply_delta", (m) => this.log.replyDelta(m.turn_id, m.text));
    s.on("response_text", (m) => this.log.replyDone(m.turn_id, m.text));
    s.on("tool_call", (m) => this.log.tool(m.turn_id, m));
    s.on("scene", (m) => this.log.scene(m.turn_id, m));
    // "extended": the user went on with the request before its reply was heard; the whole request comes as a new
    // turn, so the withdrawn half leaves no bubble of its own.
    s.on("turn_cancelled", (m) => m.reason === "extended" ? this.log.withdrawn(m.turn_id) : this.log.interrupted(m.turn_id));
    s.on("timings", (m) => this.timings(m));
    s.on("client_settings", (m) => {
      this.recording(!!(m && m.record_turns));
      if (m) $("off-record").checked = !!m.off_record;
    });
    s.on("memory", (m) => this.showMemory(m));
    // A reply may have kept or forgotten something: an open panel shows it as it now is.
    s.on("response_text", () => { if (!$("memory").hidden) this.socket.emit("memory"); });
    s.on("history_cleared", () => this.log.clear());
    s.on("error", (m) => {
      if (m && m.code === "unauthorized") this.banner("This assistant needs an access token: open the link you were given.");
      else this.toast(m && m.message ? m.message : "Something went wrong.");
    });
  }

  connected() {
    $("connection").textContent = "connected";
    $("connection").className = "connection up";
    $("banner").hidden = true;
    this.sendSettings();
  }

  // The user's time zone (the time tool answers in it) and whether the assistant may use tools.
  sendSettings() {
    if (!this.socket.connected) return;
    let timezone = null;
    try { timezone = Intl.DateTimeFormat().resolvedOptions().timeZone || null; } catch (e) { timezone = null; }
    this.socket.emit("client_settings", {
      timezone, tools: $("tools").checked ? null : [], record_turns: $("record").checked,
      off_record: $("off-record").checked,
    });
  }

  disconnected(reason) {
    this.ready = false;
    this.seated = false;
    if (this.waiting) { // the line's promise no longer holds
      this.waiting = false;
      $("banner").hidden = true;
    }
    clearTimeout(this.healthTimer);
    $("connection").textContent = "disconnected";
    $("connection").className = "connection down";
    this.setState("offline");
    this.enable(false);
    this.stopTalking();
    this.camera.stop();
    this.player.stop();
    if ($("banner").hidden) {
      this.banner(reason === "io client disconnect" ? "Disconnected." :
        "Connection to the server was lost. Reload the page to reconnect.");
    }
  }

  // All seats are taken: our place in line (1: next), until server_status says we have a seat.
  waitingInLine(m) {
    if (this.seated || !m) return; // (a place told just before the seat: stale)
    this.waiting = true;
    $("connection").textContent = "waiting";
    this.setState("waiting");
    const who = m.users === 1 ? "someone else" : `${m.users} other people`;
    const place = m.place === 1 ? "You are next in line" : `You are number ${m.place} in line`;
    this.banner(`The assistant is talking with ${who}. ${place}: it will start here by itself when a place frees up.`, false);
  }

  serverStatus(status) {
    if (!this.socket.connected) return; // a late /health answer after the connection was lost
    const seatedNow = !this.seated; // the first status of this connection: it has a seat from now on
    this.seated = true;
    if (this.waiting) {
      this.waiting = false;
      $("connection").textContent = "connected";
      $("banner").hidden = true;
    }
    if (seatedNow) { // what was sent before the seat (on connect, or chosen while in line) was not heard
      this.sendSettings();
      if ($("voice").value) this.socket.emit("set_voice", { voice: $("voice").value });
    }
    this.ready = status.ready;
    if (status.session) this.session = status.session;
    if (status.webrtc) this.webrtc = status.webrtc;
    $("loading").hidden = status.ready;
    if (!status.ready) {
      const names = { llm: "Language model", tts: "Voice" };
      const waiting = Object.entries(status.workers || {}).filter(([, w]) => w.state !== "ready");
      if (waiting.length) {
        $("loading-detail").textContent = waiting.map(([n, w]) => `${names[n] || n}: ${w.detail || w.state}.`).join(" ");
      }
      clearTimeout(this.healthTimer);
      this.healthTimer = setTimeout(() => this.pollHealth(), 1000);
    }
    this.enable(true);
    this.setState(status.ready ? "listening" : "loading");
  }

  // What is remembered of this user: a line a fact, each with its own delete button.
  showMemory(m) {
    const list = $("memory-facts");
    list.replaceChildren();
    const facts = (m && m.facts) || [];
    for (const fact of facts) {
      const item = document.createElement("li");
      const text = document.createElement("span");
      text.textContent = fact.text;
      const forget = document.createElement("button");
      forget.type = "button";
      forget.textContent = "×";
      forget.title = "forget this";
      forget.onclick = () => this.socket.emit("memory_forget", { id: fact.id });
      item.append(text, forget);
      list.append(item);
    }
    $("memory-none").textContent = m && m.enabled ? "Nothing yet. Tell Vita about yourself, or say \u201cRemember that\u2026\u201d."
      : "This connection keeps no memory (cookies are off, or the server keeps none).";
    $("memory-none").hidden = facts.length > 0;
    $("memory-forget-all").disabled = !facts.length;
    $("memory-key").textContent = m && m.user ? `Your memory id (for the operator): ${m.user}` : "";
    if (m) $("off-record").checked = !!m.off_record;
  }

  // Whether this session's turns are recorded on the server, and the id to give in a bug report.
  recording(on) {
    $("record").checked = on;
    $("recording").hidden = !on;
    $("recording").textContent = on ? `Recording turns · session ${this.session || "?"}` : "";
  }

  async pollHealth() {
    try {
      const health = await (await fetch("/health")).json();
      this.serverStatus({ ready: health.status === "ready", workers: health.workers });
    } catch (e) {
      this.healthTimer = setTimeout(() => this.pollHealth(), 2000);
    }
  }

  async loadVoices() {
    try {
      const { default: chosen, voices } = await (await fetch("/voices")).json();
      const select = $("voice");
      for (const v of voices) select.add(new Option(v, v, v === chosen, v === chosen));
    } catch (e) { /* the default voice is used */ }
  }

  // --- controls ------------------------------------------------------------------------------------------
  bindControls() {
    $("talk").onclick = () => {
      if (this.starting) return; // the microphone and the call are being set up
      if (this.talking) this.stopTalking(); else this.startTalking();
    };
    $("camera").onclick = () => this.toggleCamera();
    $("reset").onclick = () => this.socket.emit("reset_state");
    $("voice").onchange = (e) => this.socket.emit("set_voice", { voice: e.target.value });
    $("tools").onchange = () => this.sendSettings();
    $("record").onchange = () => this.sendSettings();
    $("off-record").onchange = () => this.sendSettings();
    $("memory-open").onclick = () => {
      $("memory").hidden = !$("memory").hidden;
      if (!$("memory").hidden) this.socket.emit("memory");
    };
    $("memory-forget-all").onclick = () => {
      if (confirm("Forget everything Vita remembers about you?")) this.socket.emit("memory_forget_all");
    };
    const saved = localStorage.getItem("vita-transport");
    if (saved) $("transport").value = saved;
    $("transport").onchange = (e) => {
      localStorage.setItem("vita-transport", e.target.value);
      if (this.talking) this.stopTalking().then(() => this.startTalking()); // switch at once
    };
    $("compose").onsubmit = (e) => {
      e.preventDefault();
      const text = $("text").value.trim();
      if (!text) return;
      this.player.ensure(); // a click is the moment browsers allow audio to start
      this.socket.emit("text_input", { text });
      $("text").value = "";
    };
  }

  enable(on) {
    for (const id of ["talk", "camera", "reset", "text", "send", "memory-open"]) $(id).disabled = !on;
  }

  async startTalking() {
    this.player.ensure();
    this.starting = true;
    try {
      this.micRate = await this.mic.start();
    } catch (e) {
      this.toast(`The microphone is not available: ${e.message}`);
      await this.mic.stop();
      this.starting = false;
      return;
    }
    let transport = "socket"; // no frames go anywhere until it is decided (this.transport stays null)
    if (this.wantsWebrtc()) {
      this.rtc = new RtcAudio(this.socket, $("reply-audio"), () => this.webrtcLost());
      try {
        await this.rtc.connect(this.mic.stream.getAudioTracks()[0], this.webrtc.ice_servers || []);
        transport = "webrtc";
      } catch (e) {
        this.dropWebrtc();
        this.toast(`WebRTC audio did not connect (${e.message}): using Socket.IO audio instead.`);
      }
    }
    this.starting = false;
    this.useTransport(transport);
    this.talking = true;
    this.socket.emit("recording-started");
    $("talk").textContent = "Stop talking";
    $("talk").classList.add("on");
  }

  useTransport(transport) {
    if (transport === "socket" && this.micRate !== MIC_RATE) this.socket.emit("audio_format", { sample_rate: this.micRate });
    this.transport = transport;
    this.showTransport();
  }

  dropWebrtc() {
    if (this.rtc) this.rtc.close();
    this.rtc = null;
    if (this.socket.connected) this.socket.emit("rtc_close");
  }

  // A connected call dropped: the conversation goes on over Socket.IO.
  webrtcLost() {
    if (this.transport !== "webrtc") return;
    this.dropWebrtc();
    this.useTransport("socket");
    this.toast("WebRTC audio was lost: using Socket.IO audio instead.");
  }

  wantsWebrtc() {
    return $("transport").value === "webrtc" && this.webrtc.enabled && typeof RTCPeerConnection === "function";
  }

  showTransport() {
    const shown = this.talking || this.transport ? this.transport : null;
    $("transport-live").textContent = shown === "webrtc" ? "audio: WebRTC · Opus"
      : shown === "socket" ? "audio: Socket.IO · PCM" : "";
    $("transport-live").dataset.transport = shown || "";
  }

  async stopTalking() {
    if (!this.talking) return;
    this.talking = false;
    this.dropWebrtc();
    this.transport = null;
    this.showTransport();
    await this.mic.stop();
    if (this.socket.connected) this.socket.emit("recording-stopped");
    $("talk").textContent = "Start talking";
    $("talk").classList.remove("on");
  }

  async toggleCamera() {
    if (this.camera.stream) {
      this.camera.stop();
      $("camera").textContent = "Camera off";
      return;
    }
    try {
      await this.camera.start();
      $("camera").textContent = "Camera on";
    } catch (e) {
      this.toast(`The camera is not available: ${e.message}`);
    }
  }

  // --- display -------------------------------------------------------------------------------------------
  setState(state) {
    const labels = { listening: "listening", hearing: "hearing you…", thinking: "thinking…", speaking: "speaking",
      loading: "loading models…", offline: "offline", waiting: "waiting for a place…" };
    const pill = $("state");
    pill.dataset.state = state;
    pill.textContent = labels[state] || state;
  }

  level(value) {
    $("level").style.width = `${Math.min(100, Math.round(value * 400))}%`;
  }

  timings(stage) {
    // Each stage (vad, llm, tts, front) reports its own times; show them together per turn.
    if (this.timingsTurn !== stage.turn_id) this.turnTimings = {};
    this.timingsTurn = stage.turn_id;
    const m = Object.assign(this.turnTimings, stage);
    this.log.timings(m.turn_id, m);
  }

  banner(text, error = true) {
    $("banner").textContent = text;
    $("banner").classList.toggle("error", error);
    $("banner").hidden = false;
  }

  toast(text) {
    const t = $("toast");
    t.textContent = text;
    t.hidden = false;
    clearTimeout(this.toastTimer);
    this.toastTimer = setTimeout(() => { t.hidden = true; }, 5000);
  }
}

window.vita = new App();
