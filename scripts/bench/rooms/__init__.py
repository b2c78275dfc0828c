"""Room benchmark: the assistant asked everyday questions in the rooms people use it in, driven as a client drives it.

A real server (started here, or `--url` with `--server_pid`) is talked to in one long session per room, the
microphone never paused: VITA's page (`--door vita`: a JSON `audio` message every 8 ms, 16 kHz) or a Realtime client
(`--door realtime`: 24 kHz PCM appended every 40 ms, the server's VAD). The questions are the evaluation's
(scripts/eval/questions.json, stand-alone ones), spoken by hibari and the Piper voice in turn, every one at the same
level (-26 dBFS while voiced), and scored as the evaluation scores them. Each room is built here:

- quiet: digital silence between the words;
- noise10: steady noise 10 dB under the voice, synthesized (pink noise rolled off above 1.5 kHz with a 100 Hz
  blade hum: a fan or a car), not a recording;
- babble20 / babble10 / babble5: three other talkers 20 / 10 / 5 dB under (tests/harness/speech.py `babble()`);
- babble_noise10: the babble and the steady noise together 10 dB under (each 13 dB);
- tv10: a television 10 dB under: synthesized music (chords of harmonic tones) and one more talker, at equal level;
- speaker: a speakerphone with no echo cancellation: the reply audio the client receives is played (as VITA's page
  plays it: each chunk after the one before, from its arrival; dropped at `stop_tts`, or at a Realtime response
  cancelled) and comes back into its microphone in real time, 50-250 ms later (varied question by question),
  10 dB under the user's voice, through a synthetic room (exponentially decaying noise, RT60 0.3 s);
- doubletalk: the speakerphone, and each question asks for a long reply which the user interrupts over its echo,
  1.2 s into it ("Wait, stop." and a new question): the reply must stop and the new question be answered.

Every other room also has `--barges` interruptions (in its own conditions). Reported per room: right answers /
asked; replies nobody asked for (a turn that produced reply audio and was no question of the user's: started by
the room or by the reply's own echo); replies cut by their own echo (a stop while the user said nothing); turns
the server dropped as the reply's echo; barge-ins stopped / attempted and onset -> stop latency (in the echo rooms
also onset -> the reply stopped sounding: a server that holds the reply while it hears the speech is silent first);
voice-to-voice p50 / p90 at the client (as measure.ask: last voiced sample sent -> first reply audio received); the
server's cores during the room (psutil over its whole process tree, one talking session at a time) and the client's.

Usage: .venv/bin/python -m scripts.bench.rooms [--rooms quiet,babble20,...] [--questions 12] [--barges 1]
       [--door vita|realtime] [--page_echo on|off] [--json out.json] [--url URL --server_pid PID] [-- server flags]
"""
