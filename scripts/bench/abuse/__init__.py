"""Abuse benchmark: one seated client tries to sink the front while another session asks questions.

Starts its own server (or `--url` with `--server_pid`). A victim session asks spoken questions (hibari, our page's
32 ms binary frames, the microphone open throughout) and times voice-to-voice at the client: first alone, then
while each abuser runs for `--seconds` (one at a time, each on a connection of its own), then after it has left.
The front's RSS and thread count are sampled before, at the end of, and 5 s after each abuse.

Abusers: JSON audio at the byte limit as fast as the socket takes it; binary audio likewise; speech cut into words
with 150 ms gaps (a pause, a judge job and a speculative turn every ~0.3 s); 64 ms of speech, then 2000-character
texts as fast as allowed; a typed question cut by recording-stopped/started, over and over (TTS cancels); WebRTC
offers with 120 media sections; a connected WebRTC peer flooded with ICE candidates naming loopback, private,
link-local and mDNS addresses; a calculator question whose answer once held the LLM worker's GIL, typed every
second; Realtime clients committing 120 s buffers, sending items of 40,000 tiny audio parts, and asking for
responses with 16,000 characters of instructions every second. Image abusers, each asking about its camera with a
typed question every 2 s (`camera_asker`, an ordinary camera asked about as often, is their control: each question
is a turn of the shared engine): progressive-JPEG scan bombs (thousands of empty scans), JPEG marker floods and PNGs of
inflating text chunks as `video_frame`s; 12-megapixel progressive photos as fast as the socket takes them; a
WebRTC camera of 8192² VP8 keyframes; a WebRTC camera of 1280² keyframes at 60 frames a second; a Realtime
client sending items of four 12-megapixel `input_image` parts.

The victim's camera shows a printed sign throughout (VITA's 2 fps `video_frame`s), and every third question is
"What does the sign say?": its voice-to-voice is reported apart, with whether the answer read the sign.

Targets: under each abuse the front's RSS grows <= 50 MB and its threads <= +10; the victim's
voice-to-voice p50 within 20 % of its value alone, and its camera question's within 1 s of alone; after the abuser
leaves, RSS within 10 MB of the baseline.

Usage: .venv/bin/python -m scripts.bench.abuse [--seconds 60] [--only NAME,...] [--json out.json]
"""
