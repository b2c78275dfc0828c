"""The phone door: Twilio, Telnyx and Plivo media streams (a call is a session like any other)."""
