// The AudioWorklet that VITA-1.5's own page loads from `../static/js/audio-processor.js`.
// Protocol (read from VITA's demo.html): a processor named `audio-processor`; the page posts
// {command: 'setRecording', value: true|false}; while recording, every 128-frame render quantum is posted back as
// {audio: [byte values of little-endian int16 PCM], inputData: [float samples]}, which the page emits as JSON.
// Unlike VITA's original, samples are clamped to [-1, 1] before scaling, so loud input saturates instead of
// wrapping around to the opposite sign. The output stays silent (the page connects it to the speakers).
class AudioProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.recording = false;
    this.port.onmessage = (event) => {
      const message = event.data || {};
      if (message.command === "setRecording") this.recording = Boolean(message.value);
    };
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!this.recording || !channel || channel.length === 0) return true;
    const bytes = new Array(channel.length * 2);
    const floats = new Array(channel.length);
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]));
      floats[i] = s;
      const v = s < 0 ? Math.round(s * 0x8000) : Math.round(s * 0x7fff);
      bytes[2 * i] = v & 0xff;
      bytes[2 * i + 1] = (v >> 8) & 0xff;
    }
    this.port.postMessage({ audio: bytes, inputData: floats });
    return true;
  }
}

registerProcessor("audio-processor", AudioProcessor);
