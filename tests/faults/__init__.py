"""The fault suite (issue 15): one test per fault on the real node with Tidal deployed as pods."""
