// filled in by the frontend
