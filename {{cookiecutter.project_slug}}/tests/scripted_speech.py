"""Scripted speech-to-text and silent text-to-speech, offline stand-ins for the paid
STT and TTS providers (tests/livekit_job.py gives them to the real entrypoint through
agent.new_stt and agent.new_tts, so a test job never reaches the network).

Typed turns (`session.run(user_input=...)`) skip the audio path, so they never show
what LiveKit does while a caller is still speaking: preemptive generation, which
starts a reply from a preflight transcript and may start it again as the transcript
firms up. `ScriptedSTT` drives that path: a test says what the caller says, in the
steps a streaming STT reports it, and the real AgentSession does the rest.
Use it with `turn_detection="stt"` (the STT's end-of-speech ends the turn), so no
VAD model is needed, and `SilentMicrophone` as the session's audio input.
"""

from __future__ import annotations

import asyncio

from livekit import rtc
from livekit.agents import stt, tts
from livekit.agents.language import LanguageCode
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions
from livekit.agents.voice.io import AudioInput


class SilentMicrophone(AudioInput):
    """Audio input that sends 10 ms frames of silence, as an idle microphone would."""

    def __init__(self) -> None:
        super().__init__(label="silent-microphone")

    async def __anext__(self) -> rtc.AudioFrame:
        await asyncio.sleep(0.01)
        return rtc.AudioFrame(
            b"\x00\x00" * 160,
            sample_rate=16000,
            num_channels=1,
            samples_per_channel=160,
        )


class ScriptedSTT(stt.STT):
    def __init__(self) -> None:
        super().__init__(
            capabilities=stt.STTCapabilities(streaming=True, interim_results=True)
        )
        self._stream: asyncio.Future[_ScriptedStream] = (
            asyncio.get_event_loop().create_future()
        )

    async def _recognize_impl(
        self, buffer, *, language=None, conn_options=None
    ) -> stt.SpeechEvent:
        raise NotImplementedError("ScriptedSTT only streams")

    def stream(
        self, *, language=None, conn_options=DEFAULT_API_CONNECT_OPTIONS
    ) -> _ScriptedStream:
        stream = _ScriptedStream(stt=self, conn_options=conn_options)
        if not self._stream.done():
            self._stream.set_result(stream)
        return stream

    async def say(self, *steps: str, pause: float = 0.05) -> None:
        """The caller says one turn. Every step but the last is a preflight transcript
        (what providers report before the turn is final, and what starts LiveKit's
        preemptive generation); the last is the final transcript; then end of speech."""
        stream = await asyncio.wait_for(asyncio.shield(self._stream), 5)
        stream.send(stt.SpeechEventType.START_OF_SPEECH)
        for text in steps[:-1]:
            await asyncio.sleep(pause)
            stream.send(stt.SpeechEventType.PREFLIGHT_TRANSCRIPT, text)
        await asyncio.sleep(pause)
        stream.send(stt.SpeechEventType.FINAL_TRANSCRIPT, steps[-1])
        stream.send(stt.SpeechEventType.END_OF_SPEECH)


class _ScriptedStream(stt.RecognizeStream):
    async def _run(self) -> None:
        async for _ in self._input_ch:  # the audio itself is not listened to
            pass

    def send(self, kind: stt.SpeechEventType, text: str | None = None) -> None:
        alternatives = (
            [stt.SpeechData(language=LanguageCode("en"), text=text)]
            if text is not None
            else []
        )
        self._event_ch.send_nowait(
            stt.SpeechEvent(type=kind, alternatives=alternatives)
        )


class SilentTTS(tts.TTS):
    """Text-to-speech that speaks 10 ms of silence for any text, with no connection."""

    def __init__(self) -> None:
        super().__init__(
            capabilities=tts.TTSCapabilities(streaming=False),
            sample_rate=16000,
            num_channels=1,
        )

    def synthesize(
        self,
        text: str,
        *,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
    ) -> _Silence:
        return _Silence(tts=self, input_text=text, conn_options=conn_options)


class _Silence(tts.ChunkedStream):
    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(
            request_id="silence",
            sample_rate=16000,
            num_channels=1,
            mime_type="audio/pcm",
        )
        output_emitter.push(b"\x00\x00" * 160)
        output_emitter.flush()
