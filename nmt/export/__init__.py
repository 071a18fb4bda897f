"""Deployment formats: CTranslate2 export."""
