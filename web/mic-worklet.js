// AudioWorklet: microphone samples -> int16 frames of `frameMs` at the context's rate, plus a level for the meter.
// Runs on the audio thread; the page sends each frame to the server as one binary `audio` message.
class MicFrames extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const frameMs = (options.processorOptions && options.processorOptions.frameMs) || 32;
    this.size = Math.round((sampleRate * frameMs) / 1000);
    this.frame = new Int16Array(this.size);
    this.filled = 0;
    this.sumSquares = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    for (let i = 0; i < channel.length; i++) {
      const s = Math.max(-1, Math.min(1, channel[i]));
      this.sumSquares += s * s;
      this.frame[this.filled++] = s < 0 ? s * 0x8000 : s * 0x7fff;
      if (this.filled === this.size) {
        const level = Math.sqrt(this.sumSquares / this.size);
        // The buffer is transferred (detached here), so the next frame gets a fresh one.
        this.port.postMessage({ pcm: this.frame.buffer, level }, [this.frame.buffer]);
        this.frame = new Int16Array(this.size);
        this.filled = 0;
        this.sumSquares = 0;
      }
    }
    return true;
  }
}

registerProcessor("mic-frames", MicFrames);
